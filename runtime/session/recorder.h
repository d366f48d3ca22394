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
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/session/cuda_api.h"
#include "runtime/session/ops.h"
#include "runtime/session/registry.h"
#include "runtime/session/sites.h"
#include "runtime/trace/model.h"

namespace karma::rt {

// One pointer operand of a recorded op: which registry buffer, where in it, and how much of it when known.
struct RecordedUse {
  uint64_t serial = 0;
  uint64_t offset = 0;
  uint64_t extent = 0;  // exact bytes from offset (library operands, copies); 0: unknown (kernel arguments)
  Access access = Access::kTouch;
  // Kernel arguments are probed in the profiling iteration: did the op change those bytes? (-1: not probed)
  int8_t changed = -1;
  // The profiling iteration saw the kernel set every byte of [offset, offset + written) to what it had set them
  // to, from other prior contents, and nothing past them (Session::TestOverwrites): a write of known extent that
  // does not read the old bytes. 0: not shown.
  uint64_t written = 0;
  // The same test showed that the op changed these bytes but does not set them regardless of what they held: it
  // updates them (a first touch that changed carried-over memory is then not taken as creating the value).
  bool updates = false;
  bool gaps = false;  // the extent has bytes the operand skips (Operand::gaps): not one tensor's, not all written
  bool workspace = false;  // a library call's scratch memory (Operand::workspace)
  uint32_t slot = kNoSlot;  // where the pointer sits in the call (ops.h)
};

// The bytes a use held before its op ran, compared with what the op left there (OpScope::End).
struct Probe {
  size_t use = 0;
  uint64_t ptr = 0;
  uint64_t bytes = 0;
  uint64_t alloc_end = 0;  // the end of the allocation the bytes lie in
  bool fresh = false;      // the first use of memory allocated inside the iteration: not copied before the op
  std::vector<unsigned char> before;
  std::vector<unsigned char> after;
};

struct RecordedOp {
  trace::OpKind kind = trace::OpKind::kKernel;
  std::string name;
  uint32_t stream = 0;
  std::vector<RecordedUse> uses;
  uint64_t shape = 0;  // the op's shape signature (function, grid, block, shape arguments): replay checks it
  Relaunch relaunch;  // issues it again (recompute)
  std::vector<Probe> probes;
  bool all_probed = false;  // a kernel that can be launched again, every pointer of which got a probe
  uint64_t flops = 0;
  uint64_t bytes = 0;
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  StreamKey stream_key = 0;
  // What its probes cost the issuing thread (wall clock): the log at the recording's end.
  struct ProbeCost {
    uint64_t probe_bytes = 0, probe_ns = 0;  // copies to the host before and after it, and the waits
    uint64_t reruns = 0, rerun_bytes = 0, rerun_ns = 0;  // runs on copies (Session::TestOverwrites)
    ProbeCost& operator+=(const ProbeCost& o);
  } cost;
  enum : uint8_t { kPending = 0, kDone = 1, kFailed = 2 };
  std::atomic<uint8_t> state{kPending};  // set by the thread that issued the op, after the real call
};

struct RecordedBuffer {
  BufferEntry entry;
  bool allocated_inside = false;
  bool freed_inside = false;
  bool workspace = false;
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
  std::deque<RecordedOp> ops;
  std::unordered_map<uint64_t, RecordedBuffer> buffers;  // by serial
  std::vector<uint64_t> buffer_order;                     // serials in order of first appearance
  std::vector<RecordedEvent> events;
  std::map<StreamKey, uint32_t> streams;
  uint32_t allocations = 0;  // allocations inside the iteration so far
  std::set<std::pair<uint64_t, uint64_t>> seen;  // (serial, offset) pointers ops have passed so far

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

// What the executor needs to know about each buffer of the recorded trace beyond the trace model.
struct ReplayBuffer {
  uint64_t address = 0;  // where it was (a sub-range of its allocation for inferred sub-buffers)
  uint64_t bytes = 0;
  uint64_t alloc_start = 0;  // the allocation it lies in, and its size
  uint64_t alloc_bytes = 0;
  Origin origin = Origin::kArena;
  // Bytes known to belong to one tensor, alive while the trace uses them: a whole arena allocation made and freed
  // inside the iteration and always passed by its start (one tensor per allocation), or a range inside an operand
  // whose extent the API stated (a GEMM matrix, a copy). Only such buffers may be discarded or rebuilt by a
  // recompute; the others (sub-buffers a caching allocator's pointers suggest) are only prefetched and evicted.
  bool exact = false;
  // Some library call takes these bytes as its scratch memory and some op as a tensor (a caching allocator hands
  // out the same block for both): re-running a call that writes them would destroy whatever they hold then.
  bool shared_scratch = false;
  bool allocated_inside = false;
  uint32_t alloc_ordinal = UINT32_MAX;
};

// A pointer operand of an op into memory the application sub-allocates and keeps (a caching allocator's
// segments): the same operand of a later iteration's op shows where those sub-buffers are then. Such an allocator
// may place an iteration's tensors at other offsets than the recorded iteration's (PyTorch's does, as the state
// of its free lists changes); the sub-buffers move with their pointer.
struct Anchor {
  uint32_t slot = kNoSlot;                // where the pointer sits in the call (ops.h)
  uint64_t pointer = 0;                   // its value in the recorded iteration
  std::vector<trace::BufferId> buffers;   // the sub-buffers the operand covers
};

struct ReplayOp {
  uint64_t shape = 0;
  uint32_t stream = 0;
  StreamKey stream_key = 0;
  Relaunch relaunch;
  // A kernel's ranges (address, bytes) from a pointer argument that it writes entirely without reading them
  // (RecordedUse::written).
  std::vector<std::pair<uint64_t, uint64_t>> written;
  std::vector<Anchor> anchors;
  // Operands that cover more than one buffer (one pointer into an allocation the recording split): a launch
  // writes all of them from that pointer, so none of them can be moved elsewhere for a recompute alone.
  std::vector<std::vector<trace::BufferId>> spans;
};

// The recorded iteration as a trace, plus the executor's view of it (indexed like the trace's buffers and ops).
struct RecordedIteration {
  trace::Iteration it;
  std::vector<ReplayBuffer> buffers;
  std::vector<ReplayOp> ops;
  uint32_t allocations = 0;  // allocations the iteration makes (the executor counts them the same way)
};

// Waits (bounded) for in-flight ops, reads the durations from their events and releases them, splits
// allocations that hold several tensors into the sub-buffers the ops' pointers show, classifies the buffers,
// infers phases and kinds (trace/inference.h), and builds a validated iteration. Runs on the worker thread.
Result<RecordedIteration> FinishRecording(Recording& rec, const CudaApi& api, const TraceContext& ctx);

// The trace file for this process: DIR/PROGRAM-PID.ktrace. Creates DIR (and parents) when missing.
Result<std::string> TracePath(const std::string& dir, const std::string& program, int64_t pid);

}  // namespace karma::rt
