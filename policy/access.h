// How each op uses buffers as the planner, the simulator and the checker see it (views, in-place, values).
#pragma once

#include <cstdint>
#include <vector>

#include "policy/layer_cost.h"
#include "ground/trace/model.h"

namespace karma::policy {

// The value a buffer held before any op of the iteration wrote it (carried over from the previous one).
inline constexpr uint32_t kInitialValue = UINT32_MAX - 1;

struct OpAccess {
  std::vector<trace::BufferId> reads;   // must hold valid data on the device when the op starts
  std::vector<trace::BufferId> writes;  // get a new value; allocated on the device when absent
};

struct AccessModel {
  std::vector<OpAccess> ops;
  std::vector<LayerKind> kinds;                // per op
  std::vector<bool> persistent;                // per buffer: lives across iterations (trace::ComputeLifetimes)
  std::vector<bool> dead_at_wrap;              // per buffer: its first use overwrites it, so nothing it held
                                               // before the iteration is ever read
  std::vector<bool> recomputable;              // per op: re-running it only rebuilds non-persistent buffers
  // Per buffer: the host reads or writes its value between iterations (data parallel: a gradient the ranks
  // exchange, a parameter the host optimizer updates; HomeOnHost). Every plan keeps it off the device between
  // iterations: it comes in for its first use and goes back (its value written back) after its last.
  std::vector<bool> host_home;
  std::vector<std::vector<uint32_t>> uses;     // per buffer: ops that read or write it, ascending
  // Per op, parallel to ops[i].reads: the op whose write produced the value read (kInitialValue: none did).
  std::vector<std::vector<uint32_t>> read_from;
  // Per buffer: the op that last wrote it in the forward phase (kNone: never), i.e. the value a recompute
  // of the forward pass rebuilds.
  std::vector<uint32_t> forward_writer;
  // Per buffer: the op before which the application frees it (trace::kNone: not within the iteration). A
  // recompute issued at or after that op cannot read it: the memory is no longer the application's.
  std::vector<uint32_t> freed_before;
  bool FreedBy(trace::BufferId b, uint32_t before) const {
    return freed_before[b] != trace::kNone && freed_before[b] <= before;
  }
};

// Effective accesses. A view op (aten::detach, view, t, ...) that names an existing buffer as written creates
// no data: it reads it. A touch may read and write. In-place ops list the buffer in both sets.
AccessModel BuildAccessModel(const trace::Iteration& it);

// Marks the persistent buffers flagged in `host` (per buffer; may be shorter) as homed on the host: the host
// reads their value after the iteration, so none is dead at the wrap even when its first use overwrites it.
void HomeOnHost(AccessModel& acc, const std::vector<bool>& host);

// Whether the value buffer `b` holds right before op `op` is read again: by an op at or after it, before a write
// that does not read it gives the buffer a new value, or (carried over) by the next iteration.
bool ValueReadFrom(const AccessModel& acc, trace::BufferId b, uint32_t op);

// How the ops of a recompute chain (ascending) use buffer `b`: the first and the last that read or write it
// (trace::kNone: none does), and whether that first one writes it without reading it (the chain gives it a new
// value, whatever it held before).
struct ChainUse {
  trace::OpId first = trace::kNone, last = trace::kNone;
  bool overwrites = false;
};
ChainUse UseInChain(const AccessModel& acc, const std::vector<trace::OpId>& ops, trace::BufferId b);

// The outputs of re-running `ops` (ascending) right before op `before` that go to scratch memory: buffers the
// chain writes before it reads them, which an op outside the chain writes again after the chain's last use of them
// and before `before` (memory a caching allocator gave to a later tensor), and not in between, where that newer
// value is read at or after `before`. Whoever reads such a buffer then reads the newer value, so the chain's
// value is never wanted there: it lives in scratch while the chain runs, and the newer value stays.
std::vector<trace::BufferId> ScratchOutputs(const AccessModel& acc, const std::vector<trace::OpId>& ops,
                                            uint32_t before);

// Recompute re-runs forward ops only.
bool IsForward(const trace::Op& op);

// The op whose own buffers (reads and writes) take the most bytes: no plan at tensor granularity runs the
// iteration in less.
struct LargestOp {
  trace::OpId op = trace::kNone;
  uint64_t bytes = 0;
};
LargestOp FindLargestOp(const trace::Iteration& it, const AccessModel& access);

}  // namespace karma::policy
