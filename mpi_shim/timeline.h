// The shim's record of one rank's allreduces (calls, groups, plans) and its JSON form (KARMA_MPI_TIMELINE).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ground/exchange/cost_model.h"
#include "ground/common/status.h"

namespace karma::dp {

// Host time: CLOCK_MONOTONIC in seconds, comparable with any other process's on the same machine (the
// application's own timestamps of its backward pass, other ranks).
double MonotonicSeconds();

struct CallRecord {
  uint64_t round = 0;
  int index = 0;      // in its round
  uint64_t bytes = 0;
  double issued = 0;  // the application called MPI_(I)allreduce: the buffer was final
  uint64_t group = 0;
  bool blocking = false;
};

struct GroupRecord {
  uint64_t id = 0;
  uint64_t round = 0;
  int first = 0, last = 0;  // call indices in the round
  uint64_t bytes = 0;
  bool planned = false;     // closed by a merge plan (else one call per group)
  double closed = 0;        // its last call arrived (or a wait flushed it)
  double start = 0;         // the communication thread began with it: the data goes to the host first
  double moved = 0;         // the data was on the host (the memory hooks' sync): the exchange begins
  double reduced = 0;       // the reduced data was in the callers' buffers
  double updated = 0;       // host updates done (0: none)
  double done = 0;          // requests completed
};

struct PlanRecord {
  uint64_t round = 0;       // the profiled round the plan came from
  int calls = 0;
  std::vector<int> group_ends;
  double predicted_s = 0;   // model: end of the last group after the first call, with this plan
  double wfbp_s = 0;        // the same with one allreduce per call
};

class Timeline {
 public:
  // Beyond this many calls, calls and groups are no longer recorded (a long run keeps bounded memory).
  static constexpr size_t kMaxCalls = 1 << 20;

  void AddCall(const CallRecord& c);
  void AddGroup(const GroupRecord& g);
  void AddPlan(const PlanRecord& p);
  void SetCost(const CostModel& cost, bool measured);
  Status Write(const std::string& path, int rank, int size) const;

 private:
  mutable std::mutex mu_;
  std::vector<CallRecord> calls_;
  std::vector<GroupRecord> groups_;
  std::vector<PlanRecord> plans_;
  CostModel cost_;
  bool measured_ = false;
  bool truncated_ = false;
};

// KARMA_MPI_TIMELINE with "%r" replaced by the rank.
std::string TimelinePath(const std::string& pattern, int rank);

}  // namespace karma::dp
