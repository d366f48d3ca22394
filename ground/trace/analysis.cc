// Lifetimes, the ideal memory curve and summary counts of an iteration.
#include "ground/trace/analysis.h"

#include <algorithm>

namespace karma::trace {
namespace {

bool PersistentKind(BufferKind k) {
  return k == BufferKind::kParam || k == BufferKind::kInput || k == BufferKind::kGrad || k == BufferKind::kState;
}

}  // namespace

std::vector<Lifetime> ComputeLifetimes(const Iteration& it) {
  const size_t n = it.buffers.size();
  std::vector<Lifetime> lt(n);
  std::vector<uint32_t> first_read(n, kNone), first_write(n, kNone);
  std::vector<bool> allocated_inside(n, false);
  for (const Event& e : it.events) {
    if (e.kind == EventKind::kAlloc && e.buffer < n) allocated_inside[e.buffer] = true;
  }
  auto use = [&](BufferId b, uint32_t op) {
    if (lt[b].first == kNone) lt[b].first = op;
    lt[b].last = op;
  };
  for (const Op& op : it.ops) {
    for (BufferId b : op.reads) {
      use(b, op.id);
      first_read[b] = std::min(first_read[b], op.id);
    }
    // A touch may read: for persistence it counts as a read, which keeps the contents.
    for (BufferId b : op.touches) {
      use(b, op.id);
      first_read[b] = std::min(first_read[b], op.id);
    }
    for (BufferId b : op.writes) {
      use(b, op.id);
      first_write[b] = std::min(first_write[b], op.id);
    }
  }
  for (size_t b = 0; b < n; ++b) {
    const bool read_before_write = first_read[b] != kNone && first_read[b] < first_write[b];
    const bool unused = lt[b].first == kNone;
    lt[b].persistent = PersistentKind(it.buffers[b].kind) ||
                       (!allocated_inside[b] && (read_before_write || unused));
  }
  return lt;
}

namespace {

// The curve of non-persistent buffers living from their first use to `last[b]` (kNone: not at all).
MemoryCurve CurveOf(const Iteration& it, const std::vector<Lifetime>& lifetimes, const std::vector<uint32_t>& last) {
  MemoryCurve m;
  const size_t nops = it.ops.size();
  std::vector<int64_t> delta(nops + 1, 0);
  for (size_t b = 0; b < it.buffers.size(); ++b) {
    const Lifetime& l = lifetimes[b];
    const uint64_t bytes = it.buffers[b].bytes;
    if (l.persistent) {
      m.persistent_bytes += bytes;
    } else if (l.first != kNone) {
      delta[l.first] += static_cast<int64_t>(bytes);
      delta[last[b] + 1] -= static_cast<int64_t>(bytes);
    }
  }
  m.live.resize(nops);
  m.peak_bytes = m.persistent_bytes;
  int64_t cur = 0;
  for (size_t i = 0; i < nops; ++i) {
    cur += delta[i];
    m.live[i] = m.persistent_bytes + static_cast<uint64_t>(cur);
    if (m.live[i] > m.peak_bytes || m.peak_op == kNone) {
      m.peak_bytes = std::max(m.peak_bytes, m.live[i]);
      m.peak_op = static_cast<uint32_t>(i);
    }
  }
  return m;
}

std::vector<uint32_t> LastUses(const std::vector<Lifetime>& lifetimes) {
  std::vector<uint32_t> last(lifetimes.size());
  for (size_t b = 0; b < lifetimes.size(); ++b) last[b] = lifetimes[b].last;
  return last;
}

}  // namespace

MemoryCurve IdealMemory(const Iteration& it, const std::vector<Lifetime>& lifetimes) {
  return CurveOf(it, lifetimes, LastUses(lifetimes));
}

HeldMemoryCurve HeldMemory(const Iteration& it, const std::vector<Lifetime>& lifetimes) {
  const size_t n = it.buffers.size();
  const uint32_t nops = static_cast<uint32_t>(it.ops.size());
  std::vector<bool> allocated(n, false);
  std::vector<uint32_t> freed_before(n, kNone);
  for (const Event& e : it.events) {
    if (e.buffer >= n) continue;
    if (e.kind == EventKind::kAlloc) allocated[e.buffer] = true;
    if (e.kind == EventKind::kFreeRequested) freed_before[e.buffer] = std::min(freed_before[e.buffer], e.before_op);
  }
  HeldMemoryCurve h;
  std::vector<uint32_t> held = LastUses(lifetimes);
  h.held_until.assign(n, kNone);
  std::vector<int64_t> late(static_cast<size_t>(nops) + 1, 0);
  for (size_t b = 0; b < n; ++b) {
    const Lifetime& l = lifetimes[b];
    if (l.persistent || l.first == kNone || !allocated[b]) continue;
    // Freed before op f: held through op f - 1; not freed inside the iteration: through its last op.
    if (freed_before[b] == 0) continue;  // freed before the first op: never used after all
    const uint32_t until = freed_before[b] == kNone ? nops - 1 : std::min(freed_before[b], nops) - 1;
    if (until <= l.last) continue;
    held[b] = until;
    h.held_until[b] = until;
    h.late_buffers++;
    late[l.last + 1] += static_cast<int64_t>(it.buffers[b].bytes);
    late[until + 1] -= static_cast<int64_t>(it.buffers[b].bytes);
  }
  int64_t cur = 0;
  for (uint32_t i = 0; i < nops; ++i) {
    cur += late[i];
    h.most_late_bytes = std::max(h.most_late_bytes, static_cast<uint64_t>(cur));
  }
  h.memory = CurveOf(it, lifetimes, held);
  return h;
}

Summary Summarize(const Iteration& it) {
  Summary s;
  for (const Op& op : it.ops) {
    s.ops_by_phase[static_cast<size_t>(op.phase)]++;
    s.ops_by_kind[static_cast<size_t>(op.kind)]++;
    s.total_flops += op.flops;
    s.total_op_bytes += op.bytes;
    if (op.duration_ns > 0) {
      s.measured_ns += op.duration_ns;
      s.ops_with_duration++;
    }
  }
  for (const Buffer& b : it.buffers) {
    s.buffers_by_kind[static_cast<size_t>(b.kind)].count++;
    s.buffers_by_kind[static_cast<size_t>(b.kind)].bytes += b.bytes;
    s.buffer_bytes += b.bytes;
  }
  const std::vector<Lifetime> lifetimes = ComputeLifetimes(it);
  s.memory = IdealMemory(it, lifetimes);
  s.held = HeldMemory(it, lifetimes);
  return s;
}

}  // namespace karma::trace
