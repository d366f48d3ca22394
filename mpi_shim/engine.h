// The data-parallel engine behind libkarma_mpi.so's MPI functions: rounds of allreduces, merge plans, the
// communication thread, host updates, the watchdog.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "include/karma/karma.h"
#include "ground/exchange/cost_model.h"
#include "mpi_shim/memory.h"
#include "ground/exchange/merge_plan.h"
#include "mpi_shim/mpi_api.h"
#include "mpi_shim/ordered_allreduce.h"
#include "mpi_shim/timeline.h"

namespace karma::hostopt {
class HostOptimizer;
}

namespace karma::dp {

// The KARMA_MPI_* variables.
struct EngineOptions {
  bool enabled = true;
  bool cost_given = false;
  CostModel cost;
  int timeout_s = 300;
  std::string timeline;
  bool prefetch = true;
  // A profiling round of a kind of round is issued call by call; the plan comes from the timings of this
  // many-th round of that kind (the first includes one-time start-up work of the application).
  int profile_round = 2;
  uint64_t max_group_bytes = uint64_t{256} << 20;
  // A round ends at the latest after this many calls (an application that never waits keeps bounded state;
  // such rounds are not planned).
  int max_round_calls = 1 << 16;
};
// Reads the environment; every rejected value is one message in *problems and the default is used.
EngineOptions EngineOptionsFromEnvironment(std::vector<std::string>* problems);

class Engine {
 public:
  // MPI_Init (required < 0) and MPI_Init_thread. Initializes MPI asking for MPI_THREAD_MULTIPLE (the
  // communication thread calls MPI while the application does) and starts the engine; with any lower level,
  // or KARMA_MPI=0, everything passes through.
  static int Init(const MpiApi& api, int* argc, char*** argv, int required, int* provided);
  // The running engine, or null (not initialized, disabled, finalized): the MPI functions then pass through.
  static Engine* Active();
  // The engine that ran, for statistics after MPI_Finalize too (null when none did).
  static Engine* Last();

  // Drains every call, stops the threads, writes the timeline, frees the shim's communicators, then finalizes.
  int Finalize();

  int Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
  int Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                 MPI_Request* request);
  // Every wait ends the current round (see README: rounds) and waits for the shim's requests without spinning.
  int Wait(MPI_Request* request, MPI_Status* status);
  int Waitall(int count, MPI_Request requests[], MPI_Status statuses[]);
  int Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status);
  int Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]);
  // A test of a call whose group is still open (waiting for later calls) issues that group now: an application
  // that polls before issuing more allreduces would otherwise wait forever.
  int Test(MPI_Request* request, int* flag, MPI_Status* status);
  int Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]);
  int Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status);
  int Testsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]);

  // Host updates (karma_dp_attach_optimizer): attachable before MPI_Init; detaching waits for the updates
  // already under way.
  static Status AttachOptimizer(hostopt::HostOptimizer* opt);
  static Status DetachOptimizer(hostopt::HostOptimizer* opt);
  void SetMemoryHooks(const karma_dp_memory_hooks* hooks) { memory_.SetHooks(hooks); }
  karma_dp_stats Stats() const;

  // Called back by MPI when an application communicator the shim duplicated is freed.
  void OnCommFreed(void* entry);

 private:
  struct CommEntry;
  struct Call;
  struct Group;
  struct Kind;
  struct Task;
  using CallPtr = std::shared_ptr<Call>;
  using GroupPtr = std::shared_ptr<Group>;
  // What must match for calls to be at the same place of a plan: communicator, count, type, op, blocking.
  using Signature = std::tuple<int, int, MPI_Datatype, MPI_Op, bool>;

  Engine(const MpiApi& api, const EngineOptions& options);
  int Start();  // on the application thread, inside MPI_Init
  const CommEntry* EntryFor(MPI_Comm comm);  // null: the shim does not handle this communicator
  // A call the shim takes over, or null (pass it through): intercommunicators, non-contiguous types.
  CallPtr NewCall(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                  bool blocking);
  void Submit(const CallPtr& call, std::unique_lock<std::mutex>& lock);
  void StartRound(const CallPtr& call, std::unique_lock<std::mutex>& lock);
  void CloseOpenGroup();
  void DrainLocked();
  void Drain();
  void Enqueue(Task task);
  void WaitCalls(std::vector<CallPtr> calls);
  CallPtr PendingCall(MPI_Request request);
  void FlushIfOpen(int count, const MPI_Request* requests);

  // Threads.
  void CommLoop();
  void UpdateLoop();
  void WatchdogLoop();
  void MeasureCost();
  void RunGroup(const GroupPtr& g);
  void RunPlan(Task& task);
  void Complete(const GroupPtr& g);
  void Fail(const char* what, int rc);
  int Collective(const char* what, const GroupPtr& g, const std::function<int()>& fn);

  MpiApi api_;
  EngineOptions options_;
  MPI_Comm world_dup_ = nullptr;
  int rank_ = 0, size_ = 1;
  int keyval_ = 0;
  bool cost_measured_ = false;
  CostModel cost_;

  // Application side, under mu_.
  mutable std::mutex mu_;
  std::condition_variable plan_cv_, done_cv_, queue_cv_;
  std::vector<std::unique_ptr<CommEntry>> comms_;
  std::map<Signature, std::unique_ptr<Kind>> kinds_;
  std::unordered_map<MPI_Request, CallPtr> pending_;
  bool round_open_ = false;
  uint64_t round_ = 0;
  Kind* kind_ = nullptr;
  bool following_plan_ = false, profiling_ = false, deviated_ = false, capped_ = false;
  size_t plan_group_ = 0;
  double round_start_ = 0;
  std::vector<Signature> round_sigs_;
  std::vector<PlanCall> round_calls_;
  std::map<std::tuple<int, MPI_Datatype, MPI_Op>, uint64_t> round_classes_;  // calls that can share a buffer
  GroupPtr open_;
  uint64_t next_group_ = 0;
  std::deque<Task> queue_;  // to the communication thread
  bool stopping_ = false, finalized_ = false;

  // Update thread.
  std::mutex update_mu_;
  std::condition_variable update_cv_;
  std::deque<GroupPtr> updates_;
  bool update_stop_ = false;

  // Watchdog: the collective in flight (start time, description), under watch_mu_.
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  double inflight_since_ = 0;
  std::string inflight_what_;
  bool watch_stop_ = false;

  MemoryMover memory_;
  Timeline timeline_;
  ReduceScratch scratch_;       // communication thread only
  std::vector<char> fusion_;    // communication thread only
  std::thread comm_thread_, update_thread_, watchdog_thread_;

  // Statistics (relaxed).
  std::atomic<uint64_t> stat_rounds_{0}, stat_planned_{0}, stat_calls_{0}, stat_groups_{0}, stat_bytes_{0},
      stat_updates_{0};
};

}  // namespace karma::dp
