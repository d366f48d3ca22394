// A discrete-event simulation of a plan: compute, host-to-device and device-to-host engines under a capacity.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "policy/access.h"
#include "policy/hw_profile.h"
#include "policy/plan.h"
#include "ground/trace/model.h"

namespace karma::policy {

// Everything a simulation needs about one iteration on one device; build it once, simulate many plans.
struct SimInput {
  const trace::Iteration* it = nullptr;
  AccessModel access;
  std::vector<double> op_seconds;  // cost model (OpTimes)
  HwProfile hw{};
  uint64_t capacity = 0;           // device bytes for buffers
  // Per op: the bytes of the distinct buffers it reads and writes. Above the capacity the op can only run
  // paged (a plan over managed memory); see Simulate.
  std::vector<uint64_t> working_set;
  bool Paged(trace::OpId op) const { return working_set[op] > capacity; }
};
SimInput MakeSimInput(const trace::Iteration& it, const HwProfile& hw, uint64_t capacity);

// One item the compute engine runs: an op of the iteration, or an op re-run by a recompute action.
struct ComputeItem {
  trace::OpId op = 0;
  uint32_t action = trace::kNone;  // the recompute action, kNone for the iteration's own op
  std::vector<trace::BufferId> scratch;  // that action's scratch outputs (Action::scratch), sorted
  // Whether the op uses `b` in scratch memory rather than in the buffer.
  bool ViaScratch(trace::BufferId b) const { return std::binary_search(scratch.begin(), scratch.end(), b); }
  // Scratch memory the item's action holds while its ops run.
  uint64_t ScratchBytes(const trace::Iteration& it) const {
    uint64_t n = 0;
    for (trace::BufferId b : scratch) n += it.buffers[b].bytes;
    return n;
  }
};
// The iteration's ops in order, with each recompute action's ops inserted right before its `before` op.
std::vector<ComputeItem> ComputeSequence(const Plan& plan, size_t num_ops);

// How a paged op leaves memory: of its operands that stay live after it, those touched last (its outputs, then
// its reads from the last back) remain on the device while they fit in the capacity; the others end in host
// memory, written back by the paging.
struct PagedEnd {
  uint64_t kept_bytes = 0;                   // live operands left on the device
  uint64_t home_bytes = 0;                   // live operands left in host memory
  std::vector<trace::BufferId> sent_home;
};
template <typename IsLive>
PagedEnd SettlePagedOp(const SimInput& in, trace::OpId op, uint64_t capacity, IsLive&& is_live) {
  const OpAccess& a = in.access.ops[op];
  std::vector<trace::BufferId> order = a.reads;  // touch order: reads, then what it only writes
  for (trace::BufferId b : a.writes) {
    if (std::find(a.reads.begin(), a.reads.end(), b) == a.reads.end()) order.push_back(b);
  }
  PagedEnd end;
  bool full = false;
  for (size_t i = order.size(); i-- > 0;) {
    const trace::BufferId b = order[i];
    if (!is_live(b)) continue;
    const uint64_t bytes = in.it->buffers[b].bytes;
    full = full || end.kept_bytes + bytes > capacity;
    if (full) {
      end.home_bytes += bytes;
      end.sent_home.push_back(b);
    } else {
      end.kept_bytes += bytes;
    }
  }
  return end;
}

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
  uint32_t paged_ops = 0;          // compute items that ran paged (their working set exceeds the capacity)
  double paging_s = 0;             // time those spent faulting and evicting (part of the stall)
  uint64_t paged_in_bytes = 0, paged_out_bytes = 0;  // faulted in, evicted (also in swap_in/out_bytes)
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
//
// Paged ops. An op whose working set exceeds the capacity cannot have all its buffers on the device; over
// managed memory (Plan::managed_memory) it still runs, the driver paging on demand. It starts once the copy
// engines are idle (no new copy starts while it waits or runs: faults use the same link), every buffer it
// reads is on the device or has a valid host copy, and the device has room for the buffers it leaves live
// (its `other` bytes, not its own, plus the live operands it keeps, SettlePagedOp, fit). It uses the room
// C - other: its absent reads fault in, and the W - (C - other) bytes that do not fit — or, when more, the live
// operands it sends home — are evicted during the op (PagingSeconds), stalling the compute engine; memory stays
// at the capacity meanwhile. Afterwards its dead operands are freed, its kept ones are on the device and the
// ones sent home are valid in host memory only. Without managed memory such an op never starts.
SimResult Simulate(const SimInput& in, const Plan& plan, const SimOptions& options = {});

// The fraction of time the compute engine is busy in each of `bins` equal slices of the iteration
// (needs SimOptions::record_events).
std::vector<double> OccupancyOverTime(const SimResult& r, int bins);

}  // namespace karma::policy
