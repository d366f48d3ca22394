// Building plans from decisions: write-back or drop, prefetch anchors (FIFO, earliest that fits), ordering.
#include "policy/plan_builder.h"

#include <algorithm>
#include <numeric>
#include <optional>

namespace karma::policy {
namespace {

// Event keys on one axis: compute item k is 2k; "right after op a" is 2·pos(a) + 1; the start is -1.
int64_t UseKey(size_t k) { return 2 * static_cast<int64_t>(k); }
int64_t AnchorKey(int32_t after, const std::vector<uint32_t>& pos) {
  return after == kAtStart ? -1 : 2 * static_cast<int64_t>(pos[static_cast<size_t>(after)]) + 1;
}

}  // namespace

SequenceUses::SequenceUses(const SimInput& in, const std::vector<ComputeItem>& seq)
    : offset_(in.it->buffers.size() + 1, 0) {
  auto each = [&](auto&& visit) {
    for (uint32_t k = 0; k < seq.size(); ++k) {
      const OpAccess& a = in.access.ops[seq[k].op];
      for (trace::BufferId b : a.reads) {
        if (seq[k].ViaScratch(b)) continue;
        visit(b, BufferUse{k, false, std::find(a.writes.begin(), a.writes.end(), b) != a.writes.end()});
      }
      for (trace::BufferId b : a.writes) {
        if (seq[k].ViaScratch(b)) continue;
        if (std::find(a.reads.begin(), a.reads.end(), b) == a.reads.end()) visit(b, BufferUse{k, true, true});
      }
    }
  };
  each([&](trace::BufferId b, const BufferUse&) { offset_[b + 1]++; });
  std::partial_sum(offset_.begin(), offset_.end(), offset_.begin());
  uses_.resize(offset_.back());
  std::vector<uint32_t> fill(offset_.begin(), offset_.end() - 1);
  each([&](trace::BufferId b, const BufferUse& u) { uses_[fill[b]++] = u; });
}

bool LiveAfter(const SimInput& in, const SequenceUses& uses, trace::BufferId b, uint32_t k) {
  if (in.access.persistent[b]) return true;
  for (const BufferUse& u : uses.of(b)) {
    if (u.item > k) return !u.pure_write;
  }
  return false;
}

uint32_t OwnOpAtOrAfter(const std::vector<ComputeItem>& seq, size_t k) {
  while (k < seq.size() && seq[k].action != trace::kNone) ++k;
  return k < seq.size() ? seq[k].op : static_cast<uint32_t>(seq.back().op);
}

uint32_t OwnOpBefore(const std::vector<ComputeItem>& seq, size_t k) {
  while (k > 0 && seq[k - 1].action != trace::kNone) --k;
  return k > 0 ? static_cast<uint32_t>(seq[k - 1].op) : trace::kNone;
}

std::vector<uint32_t> OpPositions(const std::vector<ComputeItem>& seq, size_t num_ops) {
  std::vector<uint32_t> pos(num_ops, 0);
  for (uint32_t k = 0; k < seq.size(); ++k) {
    if (seq[k].action == trace::kNone) pos[seq[k].op] = k;
  }
  return pos;
}

std::vector<uint64_t> StaticMemory(const SimInput& in, const Plan& plan) {
  const trace::Iteration& it = *in.it;
  const std::vector<ComputeItem> seq = ComputeSequence(plan, it.ops.size());
  const std::vector<uint32_t> pos = OpPositions(seq, it.ops.size());
  const size_t n = seq.size();
  std::vector<int64_t> delta(n + 1, 0);
  if (n == 0) return {};
  std::vector<bool> host_home(it.buffers.size(), false);
  for (trace::BufferId b : plan.host_resident) host_home[b] = true;

  // Copy actions per buffer (anchor keys are odd or -1, use keys even: no ties with uses).
  struct ActionEvent {
    trace::BufferId buffer;
    int64_t key;
    bool alloc;
  };
  std::vector<ActionEvent> actions;
  for (const Action& a : plan.actions) {
    if (a.kind == ActionKind::kRecompute || a.buffer >= it.buffers.size()) continue;
    if (a.kind == ActionKind::kSwapOut && a.keep) continue;
    actions.push_back({a.buffer, AnchorKey(a.after, pos), a.kind == ActionKind::kSwapIn});
  }
  std::stable_sort(actions.begin(), actions.end(), [](const ActionEvent& x, const ActionEvent& y) {
    return x.buffer != y.buffer ? x.buffer < y.buffer : x.key < y.key;
  });
  const SequenceUses uses(in, seq);
  auto add = [&](int64_t from, int64_t to, uint64_t bytes) {
    if (to < from) to = from;
    from = std::clamp<int64_t>(from, 0, static_cast<int64_t>(n) - 1);
    to = std::clamp<int64_t>(to, 0, static_cast<int64_t>(n) - 1);
    delta[static_cast<size_t>(from)] += static_cast<int64_t>(bytes);
    delta[static_cast<size_t>(to) + 1] -= static_cast<int64_t>(bytes);
  };
  size_t next_action = 0;
  for (size_t b = 0; b < it.buffers.size(); ++b) {
    const auto id = static_cast<trace::BufferId>(b);
    const uint64_t bytes = it.buffers[b].bytes;
    const bool persistent = in.access.persistent[b];
    bool resident = persistent && !host_home[b];
    int64_t start = 0, last_use = -1;
    const std::span<const BufferUse> u = uses.of(id);
    size_t ui = 0;
    while (next_action < actions.size() && actions[next_action].buffer < id) ++next_action;
    while (ui < u.size() || (next_action < actions.size() && actions[next_action].buffer == id)) {
      const bool take_use = ui < u.size() && (next_action >= actions.size() || actions[next_action].buffer != id ||
                                              UseKey(u[ui].item) < actions[next_action].key);
      if (take_use) {
        const BufferUse& use = u[ui++];
        const int64_t item = use.item;
        // A non-persistent value nobody reads again is freed after its last use, before being overwritten.
        if (use.pure_write && resident && !persistent && last_use >= 0) {
          add(start, last_use, bytes);
          resident = false;
        }
        if (!resident) {
          resident = true;
          start = item;
        }
        last_use = item;
        continue;
      }
      const ActionEvent& a = actions[next_action++];
      if (!a.alloc) {
        if (resident) add(start, a.key / 2, bytes);
        resident = false;
      } else if (!resident) {
        resident = true;
        start = (a.key + 1) / 2;
      }
    }
    if (!resident) continue;
    if (persistent) add(start, static_cast<int64_t>(n) - 1, bytes);
    else add(start, std::max(last_use, start), bytes);
  }
  // A recompute's scratch outputs hold memory while its ops run.
  for (size_t k = 0; k < n; ++k) {
    if (seq[k].scratch.empty()) continue;
    const auto bytes = static_cast<int64_t>(seq[k].ScratchBytes(it));
    delta[k] += bytes;
    delta[k + 1] -= bytes;
  }
  std::vector<uint64_t> mem(n);
  int64_t cur = 0;
  for (size_t k = 0; k < n; ++k) {
    cur += delta[k];
    mem[k] = static_cast<uint64_t>(cur);
  }
  return mem;
}

PlanBuilder::PlanBuilder(const SimInput& in, std::string strategy)
    : in_(in), strategy_(std::move(strategy)), host_home_(in.access.host_home) {
  host_home_.resize(in.it->buffers.size(), false);
}

void PlanBuilder::Recompute(std::vector<trace::OpId> ops, uint32_t before, int block) {
  Action a;
  a.kind = ActionKind::kRecompute;
  a.ops = std::move(ops);
  a.before = before;
  a.after = before == 0 ? kAtStart : static_cast<int32_t>(before) - 1;
  a.block = block;
  a.scratch = ScratchOutputs(in_.access, a.ops, before);
  recomputes_.push_back(std::move(a));
}

void PlanBuilder::Evict(const Eviction& e) { evictions_.push_back(e); }

std::vector<ComputeItem> PlanBuilder::Sequence() const {
  Plan p;
  p.actions = recomputes_;
  return ComputeSequence(p, in_.it->ops.size());
}

Plan PlanBuilder::Finish(uint64_t capacity) const { return Assemble(true, capacity); }

std::vector<std::pair<trace::BufferId, trace::OpId>> PlanBuilder::PagedSendsHome(
    const std::vector<ComputeItem>& seq) const {
  std::vector<std::pair<trace::BufferId, trace::OpId>> sends;
  if (!managed_) return sends;
  std::optional<SequenceUses> uses;
  for (uint32_t k = 0; k < seq.size(); ++k) {
    if (seq[k].action != trace::kNone || !in_.Paged(seq[k].op)) continue;
    if (!uses) uses.emplace(in_, seq);
    const trace::OpId op = seq[k].op;
    const PagedEnd end =
        SettlePagedOp(in_, op, in_.capacity, [&](trace::BufferId b) { return LiveAfter(in_, *uses, b, k); });
    for (trace::BufferId b : end.sent_home) sends.emplace_back(b, op);
  }
  return sends;
}

std::vector<uint64_t> PlanBuilder::LatestRestoreMemory() const {
  return StaticMemory(in_, Assemble(false, in_.capacity));
}

Plan PlanBuilder::Assemble(bool schedule, uint64_t capacity) const {
  const trace::Iteration& it = *in_.it;
  Plan plan;
  plan.strategy = strategy_;
  plan.capacity_bytes = capacity;
  plan.profile = ProfileLabel(in_.hw);
  plan.managed_memory = managed_;
  for (size_t b = 0; b < host_home_.size(); ++b) {
    if (host_home_[b]) plan.host_resident.push_back(static_cast<trace::BufferId>(b));
  }
  plan.actions = recomputes_;
  const std::vector<ComputeItem> seq = ComputeSequence(plan, it.ops.size());
  const std::vector<uint32_t> pos = OpPositions(seq, it.ops.size());
  const SequenceUses uses(in_, seq);

  // Every eviction of every buffer, the host-resident ones' arrival and departure included.
  struct Gap {
    Eviction e;
    bool from_start = false;  // a host-resident buffer's arrival: nothing to evict
  };
  std::vector<std::vector<Gap>> gaps(it.buffers.size());
  for (const Eviction& e : evictions_) {
    if (e.buffer < it.buffers.size()) gaps[e.buffer].push_back({e, false});
  }
  // What a paged op cannot keep leaves the device with it, already written back.
  for (const auto& [b, op] : PagedSendsHome(seq)) {
    bool found = false;
    for (Gap& g : gaps[b]) {
      if (!g.from_start && g.e.after == static_cast<int32_t>(op)) found = g.e.written_back = true;
    }
    if (found) continue;
    Gap g;
    g.e.buffer = b;
    g.e.after = static_cast<int32_t>(op);
    g.e.written_back = true;
    gaps[b].push_back(g);
  }
  for (size_t b = 0; b < it.buffers.size(); ++b) {
    const std::span<const BufferUse> u = uses.of(static_cast<trace::BufferId>(b));
    if (!host_home_[b] || u.empty()) continue;
    Gap arrive;
    arrive.from_start = true;
    arrive.e.buffer = static_cast<trace::BufferId>(b);
    arrive.e.need = OwnOpAtOrAfter(seq, u.front().item);
    gaps[b].push_back(arrive);
    Gap leave;
    leave.e.buffer = static_cast<trace::BufferId>(b);
    leave.e.after = static_cast<int32_t>(OwnOpAtOrAfter(seq, u.back().item));
    gaps[b].push_back(leave);
  }

  struct Restore {
    Action action;
    int32_t lowest;  // earliest anchor allowed: after the eviction
    bool fixed;      // the strategy chose the anchor
    size_t order;
    uint32_t need_item;  // the compute item that uses the buffer next
  };
  std::vector<Restore> restores;
  std::vector<Action> outs;
  for (size_t b = 0; b < it.buffers.size(); ++b) {
    auto& list = gaps[b];
    std::stable_sort(list.begin(), list.end(), [&](const Gap& x, const Gap& y) {
      const int64_t kx = x.from_start ? -2 : AnchorKey(x.e.after, pos);
      const int64_t ky = y.from_start ? -2 : AnchorKey(y.e.after, pos);
      return kx < ky;
    });
    const auto id = static_cast<trace::BufferId>(b);
    const bool persistent = in_.access.persistent[b];
    // Which value the host holds: the item that wrote it (-1: the value from before the iteration, -2: none).
    int64_t host_value = host_home_[b] ? -1 : -2;
    for (const Gap& g : list) {
      const int64_t key = g.from_start ? -1 : AnchorKey(g.e.after, pos);
      // The value on the device at the eviction, and the next use after it.
      int64_t device_value = -1;
      const BufferUse* next = nullptr;
      for (const BufferUse& u : uses.of(id)) {
        if (UseKey(u.item) < key) {
          if (u.writes) device_value = u.item;
        } else if (next == nullptr) {
          next = &u;
        }
      }
      const bool value_dead = next == nullptr ? (!persistent || in_.access.dead_at_wrap[b]) : next->pure_write;
      const bool restore = !value_dead && !g.e.recomputed && next != nullptr;
      Action in;
      int32_t lowest = kAtStart;
      if (restore) {
        in.kind = ActionKind::kSwapIn;
        in.buffer = id;
        in.block = g.e.block;
        // Back before the item that reads it next; a recompute item waits for no swap-in of its own, so before the
        // application's op that precedes it (with no such op after the eviction, the buffer stays).
        in.before = seq[next->item].action == trace::kNone ? seq[next->item].op : OwnOpBefore(seq, next->item);
        if (in.before == trace::kNone) continue;
        if (g.e.wait_before != trace::kNone && g.e.wait_before < in.before) in.before = g.e.wait_before;
        const int32_t latest = in.before == 0 ? kAtStart : static_cast<int32_t>(in.before) - 1;
        // Sent home by a paged op: it is gone when that op ends, so the copy back may start right then.
        lowest = g.from_start ? kAtStart : g.e.written_back ? g.e.after : g.e.after + 1;
        if (lowest > latest) continue;  // no op between leaving and coming back: it stays
        in.after = g.e.prefetch_after == kSchedulePrefetch ? latest : std::clamp(g.e.prefetch_after, lowest, latest);
      }
      if (!g.from_start) {
        Action out;
        out.buffer = id;
        out.after = g.e.after;
        out.block = g.e.block;
        out.kind = ActionKind::kDiscard;
        if (!value_dead && !g.e.recomputed && device_value != host_value) {
          host_value = device_value;
          if (g.e.written_back) {
            // The paging copied it out: the discard only says so.
          } else if (g.e.writeback_after == kWritebackAtEviction) {
            out.kind = ActionKind::kSwapOut;
            out.before = g.e.sync_before;
          } else {
            Action copy = out;
            copy.kind = ActionKind::kSwapOut;
            copy.keep = true;
            copy.after = std::min(g.e.writeback_after, g.e.after);
            copy.before = g.e.sync_before;
            outs.push_back(copy);
          }
        }
        outs.push_back(out);
      }
      if (!restore) continue;
      const bool fixed = g.e.prefetch_after != kSchedulePrefetch;
      restores.push_back({in, fixed ? in.after : lowest, fixed, restores.size(), next->item});
    }
  }

  auto build = [&](const std::vector<Restore>& rs) {
    Plan p = plan;
    for (const Action& a : outs) p.actions.push_back(a);
    for (const Restore& r : rs) p.actions.push_back(r.action);
    // Anchor order; at one anchor, frees before copies in, swap-ins in the order they are needed.
    auto rank = [](const Action& a) {
      switch (a.kind) {
        case ActionKind::kDiscard: return 0;
        case ActionKind::kSwapOut: return 1;
        case ActionKind::kSwapIn: return 2;
        case ActionKind::kRecompute: return 3;
      }
      return 4;
    };
    std::stable_sort(p.actions.begin(), p.actions.end(), [&](const Action& x, const Action& y) {
      if (x.after != y.after) return x.after < y.after;
      if (rank(x) != rank(y)) return rank(x) < rank(y);
      return x.kind == ActionKind::kSwapIn && x.before < y.before;
    });
    return p;
  };

  std::sort(restores.begin(), restores.end(), [](const Restore& x, const Restore& y) {
    return x.action.before != y.action.before ? x.action.before < y.action.before : x.order < y.order;
  });
  if (!schedule) return build(restores);
  if (managed_) {
    // A paged op waits for the swap-ins of its reads, which must fit beside everything else on the device
    // before it starts: restore them in the order it reads them while they fit, and let it fault in the rest.
    const std::vector<uint64_t> mem = StaticMemory(in_, build(restores));
    std::vector<bool> drop(restores.size(), false);
    for (size_t i = 0; i < restores.size();) {
      const uint32_t op = restores[i].action.before;
      size_t end = i;
      while (end < restores.size() && restores[end].action.before == op) ++end;
      if (in_.Paged(op)) {
        const std::vector<trace::BufferId>& reads = in_.access.ops[op].reads;
        auto read_index = [&](const Restore& r) {
          return std::find(reads.begin(), reads.end(), r.action.buffer) - reads.begin();
        };
        std::stable_sort(restores.begin() + static_cast<ptrdiff_t>(i), restores.begin() + static_cast<ptrdiff_t>(end),
                         [&](const Restore& x, const Restore& y) { return read_index(x) < read_index(y); });
        // Room at the op's start: the capacity less what else is on the device (mem counts the op's own
        // buffers at its item) and less its reads that are already there.
        uint64_t budget = capacity + in_.working_set[op] - std::min(mem[pos[op]], capacity + in_.working_set[op]);
        uint64_t restored = 0;
        for (size_t j = i; j < end; ++j) {
          if (restores[j].need_item == pos[op]) restored += it.buffers[restores[j].action.buffer].bytes;
        }
        uint64_t resident_reads = 0;
        for (trace::BufferId b : reads) resident_reads += it.buffers[b].bytes;
        resident_reads -= std::min(resident_reads, restored);
        budget -= std::min(budget, resident_reads);
        for (size_t j = i; j < end; ++j) {
          if (restores[j].need_item != pos[op]) continue;  // read by a recompute before the op: needed
          const uint64_t bytes = it.buffers[restores[j].action.buffer].bytes;
          if (bytes <= budget) budget -= bytes;
          else drop[j] = true;
        }
      }
      i = end;
    }
    size_t kept = 0;
    for (size_t j = 0; j < restores.size(); ++j) {
      if (!drop[j]) restores[kept++] = restores[j];
    }
    restores.resize(kept);
  }

  // First-in first-out prefetch, each as early as the memory left by everything else allows.
  std::vector<uint64_t> mem = StaticMemory(in_, build(restores));
  int32_t fifo = kAtStart;
  auto item_of = [&](int32_t anchor) -> int64_t {
    return anchor == kAtStart ? -1 : static_cast<int64_t>(pos[static_cast<size_t>(anchor)]);
  };
  for (Restore& r : restores) {
    Action& a = r.action;
    const uint64_t bytes = it.buffers[a.buffer].bytes;
    const int32_t latest = a.after;
    int32_t anchor = latest;
    const int32_t lowest = std::max(fifo, r.lowest);
    if (!r.fixed) {
      while (anchor > lowest) {
        // Moving the anchor one op earlier keeps the buffer on the device over these items too.
        const int64_t from = item_of(anchor - 1) + 1, to = item_of(anchor);
        bool fits = true;
        for (int64_t k = from; k <= to && fits; ++k) fits = mem[static_cast<size_t>(k)] + bytes <= capacity;
        if (!fits) break;
        --anchor;
      }
      for (int64_t k = item_of(anchor) + 1; k <= item_of(latest); ++k) mem[static_cast<size_t>(k)] += bytes;
      a.after = anchor;
    }
    fifo = std::max(fifo, a.after);
  }
  return build(restores);
}

}  // namespace karma::policy
