// Phase and buffer-kind inference for recorded iterations.
#include "ground/trace/inference.h"

#include <algorithm>

#include "ground/trace/analysis.h"

namespace karma::trace {
namespace {

template <typename F>
void ForEachBuffer(const Op& op, F f) {
  for (BufferId b : op.reads) f(b);
  for (BufferId b : op.writes) f(b);
  for (BufferId b : op.touches) f(b);
}

}  // namespace

void InferPhases(Iteration& it) {
  if (it.ops.empty()) return;
  for (const Op& op : it.ops) {
    if (op.phase != Phase::kUnknown) return;
  }
  const std::vector<Lifetime> lt = ComputeLifetimes(it);
  const MemoryCurve curve = IdealMemory(it, lt);
  const uint32_t peak = curve.peak_op == kNone ? 0 : curve.peak_op;
  // Activations: allocated inside the iteration, or first written by a forward op without being carried over.
  const size_t n = it.buffers.size();
  std::vector<bool> activation(n, false);
  for (const Event& e : it.events) {
    if (e.kind == EventKind::kAlloc && e.buffer < n) activation[e.buffer] = true;
  }
  for (size_t i = 0; i <= peak && i < it.ops.size(); ++i) {
    for (BufferId b : it.ops[i].writes) activation[b] = activation[b] || !lt[b].persistent;
  }
  // The optimizer: the ops after the last one that uses an activation. Copies are bookkeeping (the loss read back
  // to the host after the step) and do not end it; it needs at least one kernel or library call.
  size_t opt_begin = it.ops.size();
  bool has_launch = false;
  for (size_t i = it.ops.size(); i > peak + 1; --i) {
    const Op& op = it.ops[i - 1];
    if (op.kind == OpKind::kCopy) continue;
    bool local = false;
    ForEachBuffer(op, [&](BufferId b) { local = local || activation[b]; });
    if (local) break;
    opt_begin = i - 1;
    has_launch = true;
  }
  if (!has_launch) opt_begin = it.ops.size();
  for (size_t i = 0; i < it.ops.size(); ++i) {
    it.ops[i].phase = i <= peak ? Phase::kForward : i < opt_begin ? Phase::kBackward : Phase::kOptimizer;
  }
}

void InferKinds(Iteration& it) {
  const std::vector<Lifetime> lt = ComputeLifetimes(it);
  const size_t n = it.buffers.size();
  std::vector<bool> read_fwd(n, false), written_bwd(n, false), read_opt(n, false), written_opt(n, false),
      used_outside_opt(n, false);
  for (const Op& op : it.ops) {
    auto reads = [&](BufferId b) {
      if (op.phase == Phase::kForward) read_fwd[b] = true;
      if (op.phase == Phase::kOptimizer) read_opt[b] = true;
    };
    auto writes = [&](BufferId b) {
      if (op.phase == Phase::kBackward) written_bwd[b] = true;
      if (op.phase == Phase::kOptimizer) written_opt[b] = true;
    };
    for (BufferId b : op.reads) reads(b);
    for (BufferId b : op.writes) writes(b);
    for (BufferId b : op.touches) {
      reads(b);
      writes(b);
    }
    if (op.phase != Phase::kOptimizer) ForEachBuffer(op, [&](BufferId b) { used_outside_opt[b] = true; });
  }
  // Persistent: alive across iterations, i.e. not allocated inside this one. (The lifetime rule "read before
  // written" misses what one op reads and writes, such as a momentum buffer, and gradients an iteration
  // overwrites before reading.)
  std::vector<bool> allocated_inside(n, false);
  for (const Event& e : it.events) {
    if (e.kind == EventKind::kAlloc && e.buffer < n) allocated_inside[e.buffer] = true;
  }
  for (size_t b = 0; b < n; ++b) {
    Buffer& buf = it.buffers[b];
    if (buf.kind != BufferKind::kOther || allocated_inside[b] || lt[b].first == kNone) continue;
    if (read_fwd[b] && written_opt[b]) {
      buf.kind = BufferKind::kParam;
    } else if (written_bwd[b] && read_opt[b]) {
      buf.kind = BufferKind::kGrad;
    } else if (written_opt[b] && !used_outside_opt[b]) {
      buf.kind = BufferKind::kState;
    }
  }
}

}  // namespace karma::trace
