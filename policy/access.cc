// Effective read/write sets, value provenance and recompute eligibility of the ops of an iteration.
#include "policy/access.h"

#include <algorithm>

#include "ground/trace/analysis.h"

namespace karma::policy {
namespace {

void AddUnique(std::vector<trace::BufferId>& v, trace::BufferId b) {
  if (std::find(v.begin(), v.end(), b) == v.end()) v.push_back(b);
}

}  // namespace

ChainUse UseInChain(const AccessModel& acc, const std::vector<trace::OpId>& ops, trace::BufferId b) {
  auto has = [b](const std::vector<trace::BufferId>& v) { return std::find(v.begin(), v.end(), b) != v.end(); };
  ChainUse u;
  for (trace::OpId o : ops) {
    const bool reads = has(acc.ops[o].reads);
    if (!reads && !has(acc.ops[o].writes)) continue;
    if (u.first == trace::kNone) {
      u.first = o;
      u.overwrites = !reads;
    }
    u.last = o;
  }
  return u;
}

std::vector<trace::BufferId> ScratchOutputs(const AccessModel& acc, const std::vector<trace::OpId>& ops,
                                            uint32_t before) {
  std::vector<trace::BufferId> written;
  for (trace::OpId op : ops) {
    for (trace::BufferId b : acc.ops[op].writes) AddUnique(written, b);
  }
  std::vector<trace::BufferId> out;
  for (trace::BufferId b : written) {
    if (acc.persistent[b]) continue;
    const ChainUse u = UseInChain(acc, ops, b);
    if (!u.overwrites) continue;
    // Written from outside the chain after its last use of b (and not in between: the chain would read that).
    bool newer = false, between = false;
    for (uint32_t o : acc.uses[b]) {
      if (o <= u.first || o >= before || std::find(ops.begin(), ops.end(), o) != ops.end()) continue;
      const std::vector<trace::BufferId>& w = acc.ops[o].writes;
      if (std::find(w.begin(), w.end(), b) == w.end()) continue;
      (o > u.last ? newer : between) = true;
    }
    // Only where that value is read again: a dead one may as well be overwritten in place.
    if (newer && !between && ValueReadFrom(acc, b, before)) out.push_back(b);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool IsForward(const trace::Op& op) { return op.phase == trace::Phase::kForward; }

bool ValueReadFrom(const AccessModel& acc, trace::BufferId b, uint32_t op) {
  for (uint32_t u : acc.uses[b]) {
    if (u < op) continue;
    const OpAccess& a = acc.ops[u];
    if (std::find(a.reads.begin(), a.reads.end(), b) != a.reads.end()) return true;
    if (std::find(a.writes.begin(), a.writes.end(), b) != a.writes.end()) return false;
  }
  return acc.persistent[b] && !acc.dead_at_wrap[b];
}

void HomeOnHost(AccessModel& acc, const std::vector<bool>& host) {
  for (size_t b = 0; b < host.size() && b < acc.host_home.size(); ++b) {
    if (!host[b] || !acc.persistent[b]) continue;
    acc.host_home[b] = true;
    acc.dead_at_wrap[b] = false;
  }
}

AccessModel BuildAccessModel(const trace::Iteration& it) {
  AccessModel m;
  const size_t nb = it.buffers.size(), no = it.ops.size();
  m.ops.resize(no);
  m.kinds.resize(no);
  m.recomputable.assign(no, false);
  m.uses.resize(nb);
  m.read_from.resize(no);
  m.forward_writer.assign(nb, trace::kNone);
  const std::vector<trace::Lifetime> lt = trace::ComputeLifetimes(it);
  m.persistent.resize(nb);
  for (size_t b = 0; b < nb; ++b) m.persistent[b] = lt[b].persistent;

  std::vector<bool> created(nb, false);
  for (size_t b = 0; b < nb; ++b) created[b] = m.persistent[b];
  std::vector<uint32_t> last_writer(nb, kInitialValue);
  std::vector<bool> first_use_seen(nb, false);
  m.dead_at_wrap.assign(nb, false);
  m.host_home.assign(nb, false);

  for (const trace::Op& op : it.ops) {
    OpAccess& a = m.ops[op.id];
    const LayerKind kind = ClassifyOpName(op.name);
    m.kinds[op.id] = kind;
    for (trace::BufferId b : op.reads) {
      // Storage that is not carried over and that nothing wrote yet holds no value: the op creates it.
      if (!created[b]) AddUnique(a.writes, b);
      else AddUnique(a.reads, b);
    }
    for (trace::BufferId b : op.touches) {
      if (created[b]) AddUnique(a.reads, b);
      AddUnique(a.writes, b);
    }
    for (trace::BufferId b : op.writes) {
      // A view of storage that already holds data produces nothing; it needs the data to be there.
      if (kind == LayerKind::kAlias && created[b]) AddUnique(a.reads, b);
      else AddUnique(a.writes, b);
    }
    for (trace::BufferId b : a.reads) {
      m.read_from[op.id].push_back(last_writer[b]);
      first_use_seen[b] = true;
    }
    bool writes_persistent = false;
    for (trace::BufferId b : a.writes) {
      if (!first_use_seen[b]) m.dead_at_wrap[b] = true;  // overwritten before anything reads it
      first_use_seen[b] = true;
      created[b] = true;
      last_writer[b] = op.id;
      if (IsForward(op)) m.forward_writer[b] = op.id;
      writes_persistent = writes_persistent || m.persistent[b];
    }
    for (trace::BufferId b : a.reads) m.uses[b].push_back(op.id);
    for (trace::BufferId b : a.writes) {
      if (m.uses[b].empty() || m.uses[b].back() != op.id) m.uses[b].push_back(op.id);
    }
    m.recomputable[op.id] = IsForward(op) && kind != LayerKind::kAlias && !a.writes.empty() && !writes_persistent;
  }
  for (size_t b = 0; b < nb; ++b) {
    if (!m.persistent[b]) m.dead_at_wrap[b] = true;
  }
  m.freed_before.assign(nb, trace::kNone);
  for (const trace::Event& e : it.events) {
    const bool free = e.kind == trace::EventKind::kFreeRequested || e.kind == trace::EventKind::kFreeCompleted;
    if (free && e.buffer < nb) m.freed_before[e.buffer] = std::min(m.freed_before[e.buffer], e.before_op);
  }
  return m;
}

LargestOp FindLargestOp(const trace::Iteration& it, const AccessModel& access) {
  LargestOp largest;
  for (size_t i = 0; i < access.ops.size(); ++i) {
    const OpAccess& op = access.ops[i];
    uint64_t bytes = 0;
    for (trace::BufferId b : op.reads) bytes += it.buffers[b].bytes;
    for (trace::BufferId b : op.writes) {
      if (std::find(op.reads.begin(), op.reads.end(), b) == op.reads.end()) bytes += it.buffers[b].bytes;
    }
    if (largest.op == trace::kNone || bytes > largest.bytes) largest = {static_cast<trace::OpId>(i), bytes};
  }
  return largest;
}

}  // namespace karma::policy
