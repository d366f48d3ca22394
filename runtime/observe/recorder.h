// Recording one iteration: ops with the buffers they touch, allocation/free/sync events, and CUDA events around
// each op whose elapsed times become the measured durations. Turned into a trace off the application's threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ground/common/status.h"
#include "runtime/base/cuda_api.h"
#include "runtime/observe/ops.h"
#include "runtime/observe/registry.h"
#include "runtime/observe/sites.h"
#include "ground/trace/model.h"

namespace karma::rt {

// One pointer operand of a recorded op: which allocation, where in it, and how much of it when known.
struct RecordedUse {
  uint64_t serial = 0;
  uint64_t offset = 0;
  uint64_t extent = 0;  // exact bytes from offset (library operands, copies); 0: unknown (kernel arguments)
  Access access = Access::kTouch;
  // Kernel arguments in carried-over allocations are probed in the recorded iteration: did the op change the
  // allocation (Probes::Before and After)? -1: not probed.
  int8_t changed = -1;
  bool gaps = false;  // the extent has bytes the operand skips (Operand::gaps): not all written
  bool workspace = false;  // a library call's scratch memory (Operand::workspace)
};

// An allocation a kernel gets a pointer into, probed around the kernel: the hash of its bytes before (known
// from an earlier probe, or taken before the kernel) and after.
struct Probe {
  size_t use = 0;
  uint64_t start = 0;
  uint64_t bytes = 0;
  uint64_t before = 0;
};

struct RecordedOp {
  trace::OpKind kind = trace::OpKind::kKernel;
  std::string name;
  uint32_t stream = 0;
  std::vector<RecordedUse> uses;
  uint64_t shape = 0;  // the op's shape signature (function, grid, block, shape arguments): replay checks it
  Relaunch relaunch;  // issues it again (recompute)
  std::vector<Probe> probes;
  uint64_t flops = 0;
  uint64_t bytes = 0;
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  StreamKey stream_key = 0;
  // Some of its buffers were in host memory when it ran (the copy path before a plan, beyond the budget): its
  // elapsed time is the host link's, not the op's, and is left out (the cost model's estimate stands for it).
  bool off_device = false;
  enum : uint8_t { kPending = 0, kDone = 1, kFailed = 2 };
  std::atomic<uint8_t> state{kPending};  // set by the thread that issued the op, after the real call
};

struct RecordedBuffer {
  BufferEntry entry;
  bool allocated_inside = false;
  bool freed_inside = false;
  bool workspace = false;
  bool used = false;  // some op of the recording used it so far
  uint32_t alloc_ordinal = UINT32_MAX;  // the how-many-th allocation of the iteration (allocated inside only)
  std::string dtype;
};

struct RecordedEvent {
  trace::EventKind kind = trace::EventKind::kSync;
  uint32_t before_op = 0;
  uint64_t serial = 0;  // alloc/free events
  uint64_t time_ns = 0;
};

// One iteration being recorded. Mutated under the session's recording lock, except RecordedOp::state and the
// end events, which the issuing thread sets after the real call (ops live in a deque: their addresses stay put).
struct Recording {
  uint64_t iteration = 0;
  bool by_marker = false;
  int device = 0;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point t_end;  // when its last op was issued
  uint64_t before_ns = 0;  // the wall clock of the iteration before it (0: unknown)
  std::deque<RecordedOp> ops;
  std::unordered_map<uint64_t, RecordedBuffer> buffers;  // by serial
  std::vector<uint64_t> buffer_order;                     // serials in order of first appearance
  std::vector<RecordedEvent> events;
  std::map<StreamKey, uint32_t> streams;
  uint32_t allocations = 0;  // allocations inside the iteration so far
  // The probes: a hash of each probed allocation's bytes as the last op that touched it left them (forgotten when
  // an op the probes do not see writes it), and what they cost the recording's threads in wall clock.
  std::unordered_map<uint64_t, uint64_t> hashes;
  // Device allocations the application held when the iteration ended that no op of it used (memory the
  // recording cannot plan for: held, untouched, or used where no op showed it), and the largest of them.
  uint64_t unused = 0, unused_bytes = 0;
  BufferEntry largest_unused;
  std::atomic<uint64_t> probe_bytes{0}, probe_ns{0};

  // Adds the buffer when new; returns its record.
  RecordedBuffer& Buffer(const BufferEntry& e);
  uint32_t StreamId(StreamKey key);
  uint64_t NowNs() const;
  void AddEvent(trace::EventKind kind, uint64_t serial);
};

// What the trace needs besides the recording itself.
struct TraceContext {
  std::string model;
  std::string source;
  const SiteTable* sites = nullptr;
};

// What the executor needs to know about each buffer (an allocation) of the recorded trace beyond the trace model.
struct ReplayBuffer {
  uint64_t address = 0;  // where it was
  uint64_t bytes = 0;
  Origin origin = Origin::kArena;
  // One tensor, alive while the trace uses it: an arena allocation made and freed inside the iteration. Only such
  // buffers may be discarded or rebuilt by a recompute; the others (memory the application keeps: weights,
  // optimizer state, a caching allocator's segments) are only prefetched and evicted.
  bool exact = false;
  bool allocated_inside = false;
  uint32_t alloc_ordinal = UINT32_MAX;
};

struct ReplayOp {
  uint64_t shape = 0;
  uint32_t stream = 0;
  StreamKey stream_key = 0;
  Relaunch relaunch;
};

// The recorded iteration as a trace, plus the executor's view of it (indexed like the trace's buffers and ops).
struct RecordedIteration {
  trace::Iteration it;
  std::vector<ReplayBuffer> buffers;
  std::vector<ReplayOp> ops;
  uint32_t allocations = 0;  // allocations the iteration makes (the executor counts them the same way)
};

// Waits (bounded) for in-flight ops, reads the durations from their events and releases them, makes each
// allocation a buffer, classifies the buffers, infers phases and kinds (trace/inference.h), and builds a
// validated iteration. Runs on the worker thread.
Result<RecordedIteration> FinishRecording(Recording& rec, const CudaApi& api, const TraceContext& ctx);

// The trace file for this process: DIR/PROGRAM-PID.ktrace. Creates DIR (and parents) when missing.
Result<std::string> TracePath(const std::string& dir, const std::string& program, int64_t pid);

}  // namespace karma::rt
