// Layers, cut points, saved data, recompute chains and capacity-based gap eviction.
#include "policy/planning_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "ground/common/units.h"

namespace karma::policy {
namespace {

// An op that does a layer's work; shorter ops are bookkeeping (counters, views, scalars).
constexpr double kAnchorSeconds = 1e-6;

// Range add and leftmost maximum over compute items (a segment tree with lazy additions): capacity-based eviction
// asks for the item furthest above its limit after every gap it takes.
class MaxTree {
 public:
  explicit MaxTree(const std::vector<int64_t>& values) : n_(std::max<size_t>(values.size(), 1)) {
    max_.assign(4 * n_, 0);
    add_.assign(4 * n_, 0);
    Build(1, 0, n_ - 1, values);
  }
  void Add(size_t lo, size_t hi, int64_t v) { Add(1, 0, n_ - 1, lo, hi, v); }
  // (value, item) of the leftmost largest value.
  std::pair<int64_t, size_t> Max() const {
    size_t node = 1, lo = 0, hi = n_ - 1;
    while (lo < hi) {
      // Both children carry the same additions from above: compare them as they are.
      const size_t mid = (lo + hi) / 2;
      if (max_[2 * node] >= max_[2 * node + 1]) {
        node = 2 * node;
        hi = mid;
      } else {
        node = 2 * node + 1;
        lo = mid + 1;
      }
    }
    return {max_[1], lo};
  }

 private:
  void Build(size_t node, size_t lo, size_t hi, const std::vector<int64_t>& v) {
    if (lo == hi) {
      max_[node] = lo < v.size() ? v[lo] : INT64_MIN / 2;
      return;
    }
    const size_t mid = (lo + hi) / 2;
    Build(2 * node, lo, mid, v);
    Build(2 * node + 1, mid + 1, hi, v);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]);
  }
  void Add(size_t node, size_t lo, size_t hi, size_t a, size_t b, int64_t v) {
    if (b < lo || hi < a) return;
    if (a <= lo && hi <= b) {
      max_[node] += v;
      add_[node] += v;
      return;
    }
    const size_t mid = (lo + hi) / 2;
    Add(2 * node, lo, mid, a, b, v);
    Add(2 * node + 1, mid + 1, hi, a, b, v);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]) + add_[node];
  }
  size_t n_;
  std::vector<int64_t> max_, add_;  // max_ includes the node's own pending addition, not its ancestors'
};

// The first gap (in priority order: their index) not yet taken that covers a given item: each gap is listed in
// the O(log n) tree nodes that make up its item ranges, and each node's list is consumed front to back.
class GapIndex {
 public:
  GapIndex(size_t items, const std::vector<Gap>& gaps) : n_(std::max<size_t>(items, 1)), taken_(gaps.size(), false) {
    lists_.resize(4 * n_);
    next_.assign(4 * n_, 0);
    for (uint32_t i = 0; i < gaps.size(); ++i) {
      const Gap& g = gaps[i];
      for (const auto& [lo, hi] : {std::pair{g.lo1, g.hi1}, std::pair{g.lo2, g.hi2}}) {
        if (hi < lo || hi < 0 || lo >= static_cast<int64_t>(n_)) continue;
        Insert(1, 0, n_ - 1, static_cast<size_t>(std::max<int64_t>(lo, 0)),
               static_cast<size_t>(std::min<int64_t>(hi, static_cast<int64_t>(n_) - 1)), i);
      }
    }
  }
  // gaps.size() when none is left.
  size_t FirstCovering(size_t item) {
    size_t best = taken_.size();
    size_t node = 1, lo = 0, hi = n_ - 1;
    while (true) {
      std::vector<uint32_t>& list = lists_[node];
      size_t& next = next_[node];
      while (next < list.size() && taken_[list[next]]) ++next;
      if (next < list.size()) best = std::min<size_t>(best, list[next]);
      if (lo == hi) break;
      const size_t mid = (lo + hi) / 2;
      if (item <= mid) {
        node = 2 * node;
        hi = mid;
      } else {
        node = 2 * node + 1;
        lo = mid + 1;
      }
    }
    return best;
  }
  void Take(size_t gap) { taken_[gap] = true; }

 private:
  void Insert(size_t node, size_t lo, size_t hi, size_t a, size_t b, uint32_t gap) {
    if (b < lo || hi < a) return;
    if (a <= lo && hi <= b) {
      if (lists_[node].empty() || lists_[node].back() != gap) lists_[node].push_back(gap);
      return;
    }
    const size_t mid = (lo + hi) / 2;
    Insert(2 * node, lo, mid, a, b, gap);
    Insert(2 * node + 1, mid + 1, hi, a, b, gap);
  }
  size_t n_;
  std::vector<std::vector<uint32_t>> lists_;
  std::vector<size_t> next_;
  std::vector<bool> taken_;
};

// The op that last wrote b before op `before` in program order (kInitialValue: none did).
uint32_t ValueBefore(const PlanningModel& m, trace::BufferId b, uint32_t before) {
  const std::vector<uint32_t>& w = m.writers[b];
  auto it = std::lower_bound(w.begin(), w.end(), before);
  return it == w.begin() ? kInitialValue : *(it - 1);
}

}  // namespace

PlanningModel BuildPlanningModel(const SimInput& in) {
  PlanningModel m;
  m.in = &in;
  const trace::Iteration& it = *in.it;
  const AccessModel& acc = in.access;
  const size_t nops = it.ops.size(), nbuf = it.buffers.size();
  m.layer_of_op.resize(nops);
  bool has_anchor = false;
  for (uint32_t i = 0; i < nops; ++i) {
    const LayerKind kind = acc.kinds[i];
    const bool anchor = kind != LayerKind::kAlias && kind != LayerKind::kAllocation &&
                        in.op_seconds[i] >= kAnchorSeconds;
    const trace::Phase phase = it.ops[i].phase;
    if (m.layers.empty() || m.layers.back().phase != phase || (anchor && has_anchor)) {
      Layer l;
      l.first = l.last = l.anchor = i;
      l.phase = phase;
      l.kind = kind;
      m.layers.push_back(l);
      has_anchor = false;
    }
    Layer& l = m.layers.back();
    l.last = i;
    l.seconds += in.op_seconds[i];
    if (anchor && !has_anchor) {
      l.anchor = i;
      l.kind = kind;
      has_anchor = true;
    }
    m.layer_of_op[i] = static_cast<uint32_t>(m.layers.size() - 1);
    if (phase == trace::Phase::kForward) m.forward_end = i + 1;
  }

  m.writers.resize(nbuf);
  for (uint32_t i = 0; i < nops; ++i) {
    for (trace::BufferId b : acc.ops[i].writes) m.writers[b].push_back(i);
  }
  m.saved.assign(nbuf, false);
  m.last_forward_use.assign(nbuf, trace::kNone);
  m.first_later_use.assign(nbuf, trace::kNone);
  for (size_t b = 0; b < nbuf; ++b) {
    for (uint32_t u : acc.uses[b]) {
      if (u < m.forward_end) m.last_forward_use[b] = u;
      else if (m.first_later_use[b] == trace::kNone) m.first_later_use[b] = u;
    }
    m.saved[b] = !acc.persistent[b] && m.last_forward_use[b] != trace::kNone && m.first_later_use[b] != trace::kNone;
  }

  // A cut inside a value's forward write span (from the write that creates it to the last that updates it) would
  // leave a recompute reading a value that changes later; `buffer_cut` takes a buffer's whole forward write span.
  // ResolveRecompute refuses to rebuild an old value over a newer one that is still read.
  std::vector<int> value_span(nops + 1, 0), buffer_span(nops + 1, 0);
  auto cover = [](std::vector<int>& covered, uint32_t first, uint32_t last) {
    if (first == last) return;
    covered[first + 1]++;
    covered[last + 1]--;
  };
  for (size_t b = 0; b < nbuf; ++b) {
    uint32_t first = trace::kNone, last = trace::kNone, value = trace::kNone;
    for (uint32_t w : m.writers[b]) {
      if (w >= m.forward_end) break;
      const auto& reads = acc.ops[w].reads;
      const bool updates = std::find(reads.begin(), reads.end(), static_cast<trace::BufferId>(b)) != reads.end();
      if (first == trace::kNone) first = value = w;
      if (!updates && value != w) {
        cover(value_span, value, last);
        value = w;
      }
      last = w;
    }
    if (first == trace::kNone) continue;
    cover(value_span, value, last);
    cover(buffer_span, first, last);
  }
  m.clean_cut.assign(nops, false);
  m.buffer_cut.assign(nops, false);
  int in_value = 0, in_buffer = 0;
  for (uint32_t i = 0; i < m.forward_end; ++i) {
    in_value += value_span[i];
    in_buffer += buffer_span[i];
    const bool layer_start = m.layers[m.layer_of_op[i]].first == i;
    m.clean_cut[i] = in_value == 0 && layer_start;
    m.buffer_cut[i] = in_buffer == 0 && layer_start;
  }
  return m;
}

Result<std::vector<trace::OpId>> ResolveRecompute(const PlanningModel& m, const std::vector<trace::BufferId>& targets,
                                                  uint32_t before, const std::vector<bool>& available) {
  const AccessModel& acc = m.in->access;
  // Chains are short: flat vectors beat node-based sets here (planning resolves thousands of them).
  std::vector<uint32_t> ops;
  std::vector<std::pair<trace::BufferId, uint32_t>> queued;  // (buffer, the value it must hold)
  std::vector<std::pair<trace::BufferId, uint32_t>> work;
  auto enqueue = [&](trace::BufferId b, uint32_t v) {
    if (std::find(queued.begin(), queued.end(), std::make_pair(b, v)) != queued.end()) return;
    queued.emplace_back(b, v);
    work.emplace_back(b, v);
  };
  for (trace::BufferId t : targets) enqueue(t, ValueBefore(m, t, before));
  while (!work.empty()) {
    const auto [b, v] = work.back();
    work.pop_back();
    if (v == kInitialValue) {
      return Infeasible(fmt::format("buffer {} would need the value it had before the iteration", b));
    }
    if (!acc.recomputable[v]) {
      return Infeasible(fmt::format("buffer {} is written by op {} ({}), which cannot be re-run", b, v,
                                    m.in->it->ops[v].name));
    }
    if (m.in->Paged(v)) {  // re-running it would page it again, with nothing to anchor what it sends home
      return Infeasible(fmt::format("buffer {} is written by op {} ({}), larger than the capacity", b, v,
                                    m.in->it->ops[v].name));
    }
    if (std::find(ops.begin(), ops.end(), v) != ops.end()) continue;
    ops.push_back(v);
    const OpAccess& a = acc.ops[v];
    for (size_t i = 0; i < a.reads.size(); ++i) {
      const trace::BufferId r = a.reads[i];
      const uint32_t rv = acc.read_from[v][i];
      const bool rebuilt_here = std::find(targets.begin(), targets.end(), r) != targets.end();
      // Memory the application has freed by then holds nothing to read: the value is rebuilt too (into scratch).
      const bool there = (acc.persistent[r] || available[r]) && !acc.FreedBy(r, before);
      if (!rebuilt_here && there && ValueBefore(m, r, before) == rv) continue;
      enqueue(r, rv);
    }
  }
  std::sort(ops.begin(), ops.end());
  // Re-running an op rewrites all its outputs: a resident one must come out with the value it holds, and so must
  // one held off the device whose value is read again (what the application has freed is rebuilt into scratch
  // instead). An output whose memory a later tensor has by then goes to scratch (ScratchOutputs) only beside a
  // target of the same op (a fused op's second output): a chain that rebuilds intermediates in scratch runs
  // longer and needs more memory than the plan's capacity test sees (skipnet 192 MiB: 12-launch chains over three
  // residual units simulated at 23.4 ms and replayed at 34.0).
  const std::vector<trace::BufferId> scratch = ScratchOutputs(acc, ops, before);
  std::vector<uint32_t> target_writers;
  for (trace::BufferId t : targets) target_writers.push_back(ValueBefore(m, t, before));
  for (size_t i = 0; i < ops.size(); ++i) {
    const bool writes_target =
        std::find(target_writers.begin(), target_writers.end(), ops[i]) != target_writers.end();
    for (trace::BufferId w : acc.ops[ops[i]].writes) {
      if (std::binary_search(scratch.begin(), scratch.end(), w)) {
        if (writes_target || (!available[w] && acc.FreedBy(w, before))) continue;
        return Infeasible(fmt::format("re-running op {} would write buffer {} into scratch", ops[i], w));
      }
      if (!available[w] && (acc.FreedBy(w, before) || !ValueReadFrom(acc, w, before))) continue;
      uint32_t last = ops[i];
      for (size_t j = i + 1; j < ops.size(); ++j) {
        const auto& ws = acc.ops[ops[j]].writes;
        if (std::find(ws.begin(), ws.end(), w) != ws.end()) last = ops[j];
      }
      if (ValueBefore(m, w, before) != last) {
        return Infeasible(fmt::format("re-running op {} would overwrite buffer {}, which holds a later value", ops[i],
                                      w));
      }
    }
  }
  return ops;
}

RecomputeSet ResolveRecomputeKeeping(const PlanningModel& m, const std::vector<trace::BufferId>& targets,
                                     uint32_t before, std::vector<bool> available) {
  RecomputeSet r;
  if (auto all = ResolveRecompute(m, targets, before, available); all.ok()) {
    r.ops = std::move(all).value();
    r.rebuilt = targets;
    return r;
  }
  std::vector<bool> alone_ok(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    alone_ok[i] = ResolveRecompute(m, {targets[i]}, before, available).ok();
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (alone_ok[i]) {
      r.rebuilt.push_back(targets[i]);
    } else {
      r.kept.push_back(targets[i]);
      available[targets[i]] = true;
    }
  }
  if (auto rest = ResolveRecompute(m, r.rebuilt, before, available); rest.ok()) {
    r.ops = std::move(rest).value();
    return r;
  }
  r.kept = targets;
  r.rebuilt.clear();
  return r;
}

double SecondsOf(const PlanningModel& m, const std::vector<trace::OpId>& ops) {
  double s = 0;
  for (trace::OpId op : ops) s += m.in->op_seconds[op];
  return s;
}

std::vector<Gap> FindGaps(const PlanningModel& m, const PlanBuilder& builder, bool wrap) {
  const SimInput& in = *m.in;
  const std::vector<ComputeItem> seq = builder.Sequence();
  const std::vector<uint32_t> pos = OpPositions(seq, in.it->ops.size());
  const int64_t n = static_cast<int64_t>(seq.size());
  const SequenceUses all_uses(in, seq);
  std::set<std::pair<trace::BufferId, int32_t>> evicted;
  for (const PlanBuilder::Eviction& e : builder.evictions()) evicted.insert({e.buffer, e.after});
  for (const auto& [b, op] : builder.PagedSendsHome(seq)) evicted.insert({b, static_cast<int32_t>(op)});
  std::vector<Gap> gaps;
  for (size_t b = 0; b < in.it->buffers.size(); ++b) {
    const std::span<const BufferUse> u = all_uses.of(static_cast<trace::BufferId>(b));
    if (u.empty() || in.it->buffers[b].bytes == 0) continue;
    const bool persistent = in.access.persistent[b];
    if (persistent && !wrap) continue;
    Gap g;
    g.buffer = static_cast<trace::BufferId>(b);
    g.bytes = in.it->buffers[b].bytes;
    for (size_t i = 0; i + 1 < u.size(); ++i) {
      const uint32_t after = OwnOpAtOrAfter(seq, u[i].item);
      const uint32_t need = OwnOpAtOrAfter(seq, u[i + 1].item);
      if (need <= after + 1 || evicted.count({g.buffer, static_cast<int32_t>(after)})) continue;
      if (u[i + 1].pure_write && !persistent) continue;  // the value dies here: the buffer is freed anyway
      Gap x = g;
      x.after = static_cast<int32_t>(after);
      x.need = need;
      x.lo1 = pos[after] + 1;
      x.hi1 = u[i + 1].pure_write ? static_cast<int64_t>(u[i + 1].item) - 1 : pos[need - 1];
      if (x.hi1 >= x.lo1) gaps.push_back(x);
    }
    if (!persistent || builder.host_resident()[b]) continue;
    Gap w = g;
    w.wrap = true;
    const uint32_t first_need = OwnOpAtOrAfter(seq, u.front().item);
    w.lo1 = 0;
    w.hi1 = u.front().pure_write ? static_cast<int64_t>(u.front().item) - 1
                                 : (first_need == 0 ? -1 : static_cast<int64_t>(pos[first_need - 1]));
    w.lo2 = pos[OwnOpAtOrAfter(seq, u.back().item)] + 1;
    w.hi2 = n - 1;
    gaps.push_back(w);
  }
  return gaps;
}

void ApplyGap(PlanBuilder& b, const Gap& g, int block) {
  if (g.wrap) {
    b.AddHostResident(g.buffer);
    return;
  }
  PlanBuilder::Eviction e;
  e.buffer = g.buffer;
  e.after = g.after;
  e.need = g.need;
  e.prefetch_after = g.prefetch_after;
  e.block = block;
  b.Evict(e);
}

void DropForRecompute(const PlanningModel& m, PlanBuilder& b, trace::BufferId x, int block) {
  PlanBuilder::Eviction e;
  e.buffer = x;
  e.after = static_cast<int32_t>(m.last_forward_use[x]);
  e.need = m.first_later_use[x];
  e.recomputed = true;
  e.block = block;
  b.Evict(e);
}

ItemLimits CapacityLimits(const SimInput& in, const std::vector<ComputeItem>& seq, uint64_t capacity, bool managed) {
  ItemLimits l;
  l.target.assign(seq.size(), capacity);
  l.hard.assign(seq.size(), capacity);
  if (!managed) return l;
  auto paged = [&](trace::OpId op) { return in.working_set[op] > capacity; };
  bool any = false;
  for (const ComputeItem& c : seq) any = any || paged(c.op);
  if (!any) return l;
  const SequenceUses uses(in, seq);
  for (uint32_t k = 0; k < seq.size(); ++k) {
    const trace::OpId op = seq[k].op;
    if (!paged(op)) continue;
    const PagedEnd end = SettlePagedOp(in, op, capacity, [&](trace::BufferId b) { return LiveAfter(in, uses, b, k); });
    l.target[k] = in.working_set[op];
    l.hard[k] = capacity + in.working_set[op] - std::min(end.kept_bytes, in.working_set[op]);
  }
  return l;
}

bool WithinLimits(const std::vector<uint64_t>& mem, const std::vector<uint64_t>& limit) {
  for (size_t k = 0; k < mem.size(); ++k) {
    if (mem[k] > limit[k]) return false;
  }
  return true;
}

Status EvictGreedily(const PlanningModel& m, PlanBuilder& b, std::vector<Gap> gaps, uint64_t capacity) {
  std::stable_sort(gaps.begin(), gaps.end(), [](const Gap& x, const Gap& y) {
    return x.cls != y.cls ? x.cls < y.cls : x.order < y.order;
  });
  const std::vector<ComputeItem> seq = b.Sequence();
  const ItemLimits limits = CapacityLimits(*m.in, seq, capacity, b.managed_memory());
  GapIndex index(seq.size(), gaps);
  for (int round = 0; round < 8; ++round) {
    const std::vector<uint64_t> mem = b.LatestRestoreMemory();
    std::vector<int64_t> excess(mem.size());
    for (size_t k = 0; k < mem.size(); ++k) {
      excess[k] = static_cast<int64_t>(mem[k]) - static_cast<int64_t>(limits.target[k]);
    }
    MaxTree over(excess);
    while (true) {
      const auto [worst, p] = over.Max();
      if (worst <= 0) break;
      const size_t pick = index.FirstCovering(p);
      if (pick == gaps.size()) {
        const uint64_t now = limits.target[p] + static_cast<uint64_t>(worst);
        if (now <= limits.hard[p]) {  // a paged op: what stays beside it pages too
          over.Add(p, p, -worst);
          continue;
        }
        const trace::OpId op = seq[p].op;
        return Infeasible(fmt::format("{} are needed at op {} ({}) even with everything evictable off the device, "
                                      "capacity {}", FormatBytes(now), op, m.in->it->ops[op].name,
                                      FormatBytes(capacity)));
      }
      index.Take(pick);
      const Gap& g = gaps[pick];
      ApplyGap(b, g);
      // An estimate until the next round recomputes it.
      const auto bytes = static_cast<int64_t>(g.bytes);
      if (g.hi1 >= g.lo1) over.Add(static_cast<size_t>(g.lo1), static_cast<size_t>(g.hi1), -bytes);
      if (g.hi2 >= g.lo2) over.Add(static_cast<size_t>(g.lo2), static_cast<size_t>(g.hi2), -bytes);
    }
    const std::vector<uint64_t> check = b.LatestRestoreMemory();
    if (WithinLimits(check, limits.hard)) return Status::Ok();
  }
  return Infeasible("capacity-based eviction did not converge");
}

}  // namespace karma::policy
