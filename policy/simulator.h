// A discrete-event simulation of a plan: compute, host-to-device and device-to-host engines under a capacity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/access.h"
#include "policy/hw_profile.h"
#include "policy/plan.h"
#include "runtime/trace/model.h"

namespace karma::policy {

// Everything a simulation needs about one iteration on one device; build it once, simulate many plans.
struct SimInput {
  const trace::Iteration* it = nullptr;
  AccessModel access;
  std::vector<double> op_seconds;  // cost model (OpTimes)
  HwProfile hw{};
  uint64_t capacity = 0;           // device bytes for buffers
};
SimInput MakeSimInput(const trace::Iteration& it, const HwProfile& hw, uint64_t capacity);

// One item the compute engine runs: an op of the iteration, or an op re-run by a recompute action.
struct ComputeItem {
  trace::OpId op = 0;
  uint32_t action = trace::kNone;  // the recompute action, kNone for the iteration's own op
};
// The iteration's ops in order, with each recompute action's ops inserted right before its `before` op.
std::vector<ComputeItem> ComputeSequence(const Plan& plan, size_t num_ops);

// What happened, in the order the simulator processed it (times are non-decreasing).
struct SimEvent {
  enum Kind : uint8_t { kComputeStart, kComputeEnd, kCopyStart, kCopyEnd, kDiscard };
  Kind kind;
  double t;
  uint32_t index;  // compute events: index into ComputeSequence; copy and discard events: action index
};

struct SimResult {
  bool feasible = false;
  std::string reason;              // why not, when infeasible
  double iteration_s = 0;          // until every engine is idle and every action done
  double compute_s = 0;            // the iteration's own ops
  double recompute_s = 0;          // re-run ops
  double stall_s = 0;              // iteration_s - compute_s - recompute_s: compute engine idle
  double h2d_busy_s = 0, d2h_busy_s = 0;
  uint64_t swap_in_bytes = 0, swap_out_bytes = 0;
  uint64_t peak_bytes = 0;         // most device bytes allocated at once (in-flight swap-ins included)
  std::vector<std::pair<double, uint64_t>> memory;  // (time, bytes allocated from then on), at every change
  std::vector<SimEvent> events;    // when SimOptions::record_events
  std::vector<ComputeItem> sequence;
  // Eq. 1 of the paper: the fraction of the iteration the compute engine is busy.
  double Occupancy() const { return iteration_s > 0 ? (compute_s + recompute_s) / iteration_s : 1.0; }
};

struct SimOptions {
  bool record_events = false;
  bool record_memory = false;
};

// Runs the plan. An invalid plan (bad references, a read of data that is not on the device, a swap-in of a
// stale host copy, capacity that can never be met, a persistent buffer not back home at the end) gives
// feasible = false and the reason.
SimResult Simulate(const SimInput& in, const Plan& plan, const SimOptions& options = {});

// The fraction of time the compute engine is busy in each of `bins` equal slices of the iteration
// (needs SimOptions::record_events).
std::vector<double> OccupancyOverTime(const SimResult& r, int bins);

}  // namespace karma::policy
