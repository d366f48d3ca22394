// KARMA: blocking, recompute selection, plan construction, and the search over their parameters.
#include "policy/karma.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "policy/strategies.h"
#include "ground/common/units.h"

namespace karma::policy {
namespace {

// The block holding op `op`'s forward position (blocks are sorted and cover the forward pass).
int BlockOfOp(const std::vector<Block>& blocks, uint32_t op) {
  auto it = std::upper_bound(blocks.begin(), blocks.end(), op,
                             [](uint32_t o, const Block& b) { return o < b.first_op; });
  if (it == blocks.begin()) return -1;
  const int i = static_cast<int>(it - blocks.begin()) - 1;
  return op <= blocks[static_cast<size_t>(i)].last_op ? i : -1;
}

uint32_t LastForwardWrite(const PlanningModel& m, trace::BufferId b) {
  uint32_t last = trace::kNone;
  for (uint32_t w : m.writers[b]) {
    if (w < m.forward_end) last = w;
  }
  return last;
}

// Per buffer: the block whose forward ops last write it (-1: persistent, or not written in forward).
std::vector<int> Owners(const PlanningModel& m, const std::vector<Block>& blocks) {
  std::vector<int> owner(m.in->it->buffers.size(), -1);
  for (size_t x = 0; x < owner.size(); ++x) {
    if (m.in->access.persistent[x]) continue;
    const uint32_t w = LastForwardWrite(m, static_cast<trace::BufferId>(x));
    if (w != trace::kNone) owner[x] = BlockOfOp(blocks, w);
  }
  return owner;
}

// Read by a forward op after the block ends: a later block's recompute needs it as its checkpoint.
bool CrossesEnd(const PlanningModel& m, trace::BufferId x, const Block& block) {
  return m.last_forward_use[x] != trace::kNone && m.last_forward_use[x] > block.last_op;
}

uint32_t FirstNeed(const PlanningModel& m, const std::vector<trace::BufferId>& xs) {
  uint32_t need = trace::kNone;
  for (trace::BufferId x : xs) need = std::min(need, m.first_later_use[x]);
  return need;
}

// The block decisions in a builder: recomputes, drops and swaps. Blocks whose recompute cannot be resolved
// fall back to swapping; `blocks` is updated to the modes actually used.
void AddBlockDecisions(const PlanningModel& m, std::vector<Block>& blocks, const KarmaPlanOptions& options,
                       PlanBuilder& b) {
  const SimInput& in = *m.in;
  const size_t nbuf = in.it->buffers.size();
  const std::vector<int> owner = Owners(m, blocks);
  std::vector<bool> dropped(nbuf, false);
  std::vector<std::vector<trace::BufferId>> targets(blocks.size());
  for (size_t x = 0; x < nbuf; ++x) {
    const int o = owner[x];
    if (o < 0 || !m.saved[x]) continue;
    const Block& blk = blocks[static_cast<size_t>(o)];
    if (blk.mode == BlockMode::kRecompute && !CrossesEnd(m, static_cast<trace::BufferId>(x), blk)) {
      dropped[x] = true;
      targets[static_cast<size_t>(o)].push_back(static_cast<trace::BufferId>(x));
    }
  }
  // Recompute starts from values that stay or come back: saved data not dropped, and what crosses a block end.
  std::vector<bool> crossing(nbuf, false);
  for (size_t x = 0; x < nbuf; ++x) {
    if (owner[x] >= 0) crossing[x] = CrossesEnd(m, static_cast<trace::BufferId>(x), blocks[static_cast<size_t>(owner[x])]);
  }
  std::vector<bool> available(nbuf);
  for (size_t x = 0; x < nbuf; ++x) available[x] = !dropped[x] && (m.saved[x] || crossing[x]);
  auto set_dropped = [&](trace::BufferId x, bool d) {
    dropped[x] = d;
    available[x] = !d && (m.saved[x] || crossing[x]);
  };
  // Problem 2 at layer granularity: cheap values (rebuilt for less than a fraction of their swap-in time, like
  // normalization, activation and pooling outputs) are dropped and rebuilt from the heavy layers' outputs — in
  // swapped blocks instead of crossing the link, and optionally in kept blocks to make room. They are grouped by
  // the heavy layer before them, so each rebuild runs right before its backward use.
  struct Group {
    std::vector<trace::BufferId> targets;
    int block;
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (!targets[i].empty()) groups.push_back({targets[i], static_cast<int>(i)});
  }
  if (options.cheap_recompute_ratio > 0) {
    std::vector<uint32_t> segment_of(m.forward_end, 0);
    for (uint32_t op = 0, seg = 0; op < m.forward_end; ++op) {
      if (op > 0 && IsComputeIntensive(in.access.kinds[op])) ++seg;
      segment_of[op] = seg;
    }
    std::map<uint32_t, size_t> group_of_segment;
    for (size_t x = 0; x < nbuf; ++x) {
      const int o = owner[x];
      if (o < 0 || !m.saved[x] || dropped[x]) continue;
      const BlockMode mode = blocks[static_cast<size_t>(o)].mode;
      if (mode != BlockMode::kSwap && !(mode == BlockMode::kKeep && options.cheap_in_kept_blocks)) continue;
      const auto id = static_cast<trace::BufferId>(x);
      if (CrossesEnd(m, id, blocks[static_cast<size_t>(o)])) continue;
      auto ops = ResolveRecompute(m, {id}, m.first_later_use[x], available);
      if (!ops.ok()) continue;
      const double swap_s = static_cast<double>(in.it->buffers[x].MovedBytes()) / in.hw.h2d_bw();
      if (SecondsOf(m, *ops) >= options.cheap_recompute_ratio * swap_s) continue;
      set_dropped(id, true);
      const uint32_t seg = segment_of[LastForwardWrite(m, id)];
      auto [it, fresh] = group_of_segment.try_emplace(seg, groups.size());
      if (fresh) groups.push_back({{}, o});
      groups[it->second].targets.push_back(id);
    }
  }
  // One recompute per group, before the first backward use of what it rebuilds. What cannot be rebuilt
  // without disturbing a value that stays goes back to its block's treatment (swapped, or kept).
  for (size_t gi = groups.size(); gi-- > 0;) {
    std::vector<trace::BufferId>& t = groups[gi].targets;
    const size_t i = static_cast<size_t>(groups[gi].block);
    RecomputeSet r = ResolveRecomputeKeeping(m, t, FirstNeed(m, t), available);
    for (trace::BufferId x : r.kept) set_dropped(x, false);
    t = r.rebuilt;
    const uint32_t need = FirstNeed(m, t);
    auto ops = t.empty() ? Result<std::vector<trace::OpId>>(Infeasible("nothing to rebuild"))
                         : ResolveRecompute(m, t, need, available);
    if (!ops.ok()) {
      for (trace::BufferId x : t) set_dropped(x, false);
      t.clear();
      if (blocks[i].mode == BlockMode::kRecompute) blocks[i].mode = BlockMode::kSwap;
      continue;
    }
    b.Recompute(std::move(ops).value(), need, static_cast<int>(i));
  }
  for (const Group& g : groups) {
    for (trace::BufferId x : g.targets) DropForRecompute(m, b, x, g.block);
  }
  // Evicted blocks swap what they do not rebuild: the gap from the last forward use to the next use (a
  // backward op, or a later block's recompute that reads it as its checkpoint).
  for (Gap g : FindGaps(m, b, false)) {
    if (g.after >= static_cast<int32_t>(m.forward_end) || g.need < m.forward_end) continue;
    const int o = owner[g.buffer];
    if (o < 0 || blocks[static_cast<size_t>(o)].mode == BlockMode::kKeep || dropped[g.buffer]) continue;
    ApplyGap(b, g, o);
  }
}

}  // namespace

std::span<const KarmaPlanOptions> KarmaLayerOptions() {
  static constexpr KarmaPlanOptions kOptions[] = {{0, false}, {0.5, false}, {0.5, true}, {2, true}};
  return kOptions;
}

std::span<const uint32_t> KarmaBlockCounts() {
  static constexpr uint32_t kCounts[] = {4, 8, 16, 32};
  return kCounts;
}

std::string DescribeLayerOptions(const KarmaPlanOptions& lo) {
  if (lo.cheap_recompute_ratio == 0) return "";
  if (lo.cheap_in_kept_blocks) return fmt::format(", cheap layers (< {}x swap-in) rebuilt", lo.cheap_recompute_ratio);
  return fmt::format(", cheap layers (< {}x swap-in) of swapped blocks rebuilt", lo.cheap_recompute_ratio);
}

uint64_t SavedBytes(const PlanningModel& m) {
  uint64_t total = 0;
  for (size_t x = 0; x < m.in->it->buffers.size(); ++x) {
    if (m.saved[x]) total += m.in->it->buffers[x].bytes;
  }
  return total;
}

std::vector<uint32_t> BlockCuts(const PlanningModel& m, bool whole_buffers) {
  std::vector<uint32_t> cuts;
  for (uint32_t op = 0; op < m.forward_end; ++op) {
    if (op == 0 || (whole_buffers ? m.buffer_cut[op] : m.clean_cut[op])) cuts.push_back(op);
  }
  return cuts;
}

std::vector<bool> CutKinds(const PlanningModel& m) {
  if (BlockCuts(m, true) == BlockCuts(m)) return {false};
  return {false, true};
}

std::vector<Block> BlocksFromCuts(const PlanningModel& m, const std::vector<uint32_t>& starts) {
  std::vector<Block> blocks;
  for (size_t i = 0; i < starts.size(); ++i) {
    const uint32_t end = i + 1 < starts.size() ? starts[i + 1] : m.forward_end;
    if (end > starts[i]) blocks.push_back({starts[i], end - 1, BlockMode::kKeep});
  }
  return blocks;
}

BlockFacts FactsOf(const PlanningModel& m, const std::vector<Block>& blocks, size_t index) {
  const SimInput& in = *m.in;
  BlockFacts f;
  const Block& blk = blocks[index];
  for (uint32_t op = blk.first_op; op <= blk.last_op; ++op) f.forward_s += in.op_seconds[op];
  const std::vector<int> owner = Owners(m, blocks);
  std::vector<trace::BufferId> dropped;
  std::vector<bool> available(in.it->buffers.size(), false);
  for (size_t x = 0; x < owner.size(); ++x) {
    if (owner[x] >= 0) {
      available[x] = m.saved[x] || CrossesEnd(m, static_cast<trace::BufferId>(x), blocks[static_cast<size_t>(owner[x])]);
    }
  }
  for (size_t x = 0; x < owner.size(); ++x) {
    if (owner[x] != static_cast<int>(index) || !m.saved[x]) continue;
    f.saved_bytes += in.it->buffers[x].bytes;
    f.saved_moved += in.it->buffers[x].MovedBytes();
    if (CrossesEnd(m, static_cast<trace::BufferId>(x), blk)) continue;
    f.dropped_bytes += in.it->buffers[x].bytes;
    f.dropped_moved += in.it->buffers[x].MovedBytes();
    dropped.push_back(static_cast<trace::BufferId>(x));
    available[x] = false;
  }
  f.swap_in_s = static_cast<double>(f.saved_moved) / in.hw.h2d_bw();
  if (dropped.empty()) {
    f.recompute_s = 0;
  } else if (auto ops = ResolveRecompute(m, dropped, FirstNeed(m, dropped), available); ops.ok()) {
    f.recompute_s = SecondsOf(m, *ops);
  }
  return f;
}

std::vector<Block> SolveBlocking(const PlanningModel& m, const BlockingOptions& options) {
  const SimInput& in = *m.in;
  const std::vector<uint32_t> cuts = BlockCuts(m, options.whole_buffers);
  std::vector<uint64_t> saved_at(m.forward_end + 1, 0);  // saved bytes by last forward writer
  for (size_t x = 0; x < in.it->buffers.size(); ++x) {
    if (!m.saved[x]) continue;
    const uint32_t w = LastForwardWrite(m, static_cast<trace::BufferId>(x));
    if (w != trace::kNone) saved_at[w] += in.it->buffers[x].bytes;
  }
  std::vector<uint32_t> starts;
  uint64_t acc = 0;
  size_t c = 0;
  for (uint32_t op = 0; op < m.forward_end; ++op) {
    while (c < cuts.size() && cuts[c] < op) ++c;
    const bool at_cut = c < cuts.size() && cuts[c] == op;
    if (at_cut && (starts.empty() || acc >= options.target_block_bytes)) {
      starts.push_back(op);
      acc = 0;
    }
    acc += saved_at[op];
  }
  std::vector<Block> blocks = BlocksFromCuts(m, starts);
  // Capacity-based: the fewest leading blocks whose eviction (swapped) makes the plan fit.
  auto fits = [&](size_t evicted) {
    std::vector<Block> trial = blocks;
    for (size_t i = 0; i < evicted; ++i) trial[i].mode = BlockMode::kSwap;
    const PlanBuilder b = KarmaBlockDecisions(m, trial, options.plan);
    return WithinLimits(b.LatestRestoreMemory(), CapacityLimits(in, b.Sequence(), in.capacity, true).hard);
  };
  size_t lo = 0, hi = blocks.size();
  if (!fits(hi)) {
    lo = hi;
  } else {
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (fits(mid)) hi = mid;
      else lo = mid + 1;
    }
  }
  const size_t evicted = std::min(blocks.size(), lo + options.extra_evicted);
  for (size_t i = 0; i < evicted; ++i) blocks[i].mode = BlockMode::kSwap;
  return blocks;
}

void SelectRecompute(const PlanningModel& m, std::vector<Block>& blocks, const RecomputeOptions& options) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].mode != BlockMode::kSwap) continue;
    const BlockFacts f = FactsOf(m, blocks, i);
    const double swap_s = static_cast<double>(f.dropped_moved) / m.in->hw.h2d_bw();
    if (f.dropped_bytes > 0 && f.recompute_s >= 0 && f.recompute_s < options.ratio * swap_s) {
      blocks[i].mode = BlockMode::kRecompute;
    }
  }
}

PlanBuilder KarmaBlockDecisions(const PlanningModel& m, std::vector<Block>& blocks, const KarmaPlanOptions& options) {
  PlanBuilder b(*m.in, "karma");
  b.set_managed_memory(true);
  AddBlockDecisions(m, blocks, options, b);
  return b;
}

Result<Plan> BuildKarmaPlan(const PlanningModel& m, const std::vector<Block>& blocks_in,
                            const KarmaPlanOptions& options) {
  const SimInput& in = *m.in;
  std::vector<Block> blocks = blocks_in;
  PlanBuilder b = KarmaBlockDecisions(m, blocks, options);
  // Whatever still does not fit goes capacity-based: activations in forward order, then dead persistent
  // values, then weights and optimizer state (first needed latest first).
  std::vector<Gap> gaps = FindGaps(m, b, true);
  for (Gap& g : gaps) {
    if (!in.access.persistent[g.buffer]) {
      g.order = g.after;
    } else if (g.wrap && in.access.dead_at_wrap[g.buffer]) {
      g.order = -1;
    } else {
      g.cls = 1;
      g.order = g.wrap ? -static_cast<int64_t>(g.hi1) : g.after;
    }
  }
  KARMA_RETURN_IF_ERROR(EvictGreedily(m, b, std::move(gaps), in.capacity));
  Plan plan = b.Finish(in.capacity);
  plan.blocks = std::move(blocks);
  return plan;
}

int PolishKarmaPlan(const SimInput& in, const KarmaPlanOptions& options, Candidate& best,
                    const std::function<bool()>& more) {
  // One neighbour of the current plan: its blocks with one boundary moved to the next cut either way or one
  // block's mode changed, or the ops of one of its recomputes barred from recompute.
  struct Variant {
    std::vector<Block> blocks;
    std::vector<trace::OpId> bar;
  };
  SimInput current = in;  // with the ops of the recomputes left out so far barred
  PlanningModel m = BuildPlanningModel(current);  // of `current`, rebuilt when a barred recompute is kept
  const std::vector<uint32_t> cuts = BlockCuts(m);
  int tried = 0;
  for (bool improved = true; improved;) {
    improved = false;
    const Plan from = best.plan;
    std::vector<Variant> variants;
    for (const Action& a : from.actions) {
      if (a.kind == ActionKind::kRecompute) variants.push_back({from.blocks, a.ops});
    }
    for (size_t i = 0; i < from.blocks.size(); ++i) {
      for (const BlockMode mode : {BlockMode::kKeep, BlockMode::kSwap, BlockMode::kRecompute}) {
        if (mode == from.blocks[i].mode) continue;
        Variant v{from.blocks, {}};
        v.blocks[i].mode = mode;
        variants.push_back(std::move(v));
      }
    }
    for (size_t i = 0; i + 1 < from.blocks.size(); ++i) {
      const uint32_t at = from.blocks[i + 1].first_op;
      const auto c = std::lower_bound(cuts.begin(), cuts.end(), at);
      if (c == cuts.end() || *c != at) continue;
      for (const uint32_t to : {c == cuts.begin() ? at : *(c - 1), c + 1 == cuts.end() ? at : *(c + 1)}) {
        if (to <= from.blocks[i].first_op || to > from.blocks[i + 1].last_op) continue;
        Variant v{from.blocks, {}};
        v.blocks[i].last_op = to - 1;
        v.blocks[i + 1].first_op = to;
        variants.push_back(std::move(v));
      }
    }
    for (const Variant& v : variants) {
      if (!more()) return tried;
      // A block change plans on the current model; a barred recompute on a copy with its ops barred too.
      SimInput barred;
      std::optional<PlanningModel> barred_m;
      if (!v.bar.empty()) {
        barred = current;
        for (trace::OpId op : v.bar) barred.access.recomputable[op] = false;
        barred_m = BuildPlanningModel(barred);
      }
      Result<Plan> p = BuildKarmaPlan(barred_m ? *barred_m : m, v.blocks, options);
      ++tried;
      // No plan, or the same one (a block set to kRecompute whose recompute cannot be resolved is swapped).
      if (!p.ok() || p->actions == from.actions) continue;
      p->strategy = from.strategy;
      p->note = from.note;
      p->managed_memory = from.managed_memory;
      if (KeepFaster(best, std::move(p).value(), in)) {
        if (!v.bar.empty()) {
          for (trace::OpId op : v.bar) current.access.recomputable[op] = false;
          m = BuildPlanningModel(current);
        }
        improved = true;
        break;
      }
    }
  }
  return tried;
}

// KARMA (Wahib et al., SC20): capacity-based swapping of blocks of layers (problem 1), with blocks whose
// recompute costs less than their swap-in recomputed instead, interleaved with the swap-in of the blocks
// before them (problem 2). Problem 1's block size and problem 2's threshold are searched, each candidate
// simulated; capacity-only and checkpoint-only plans are candidates too, so KARMA is never slower than either.
Result<Plan> PlanKarma(const SimInput& in) {
  if (Result<Plan> incore = PlanInCore(in); incore.ok()) {
    const auto homed = std::count(in.access.host_home.begin(), in.access.host_home.end(), true);
    if (homed == 0) {
      incore->strategy = "karma";
      incore->note = "fits in core";
      return incore;
    }
    // Nothing else moves, but what the host reads and writes between iterations comes in and goes back.
    PlanBuilder b(in, "karma");
    b.set_managed_memory(true);
    Plan plan = b.Finish(in.capacity);
    plan.note = fmt::format("fits in core; {} buffers homed on the host come in and go back", homed);
    return plan;
  }
  const PlanningModel m = BuildPlanningModel(in);
  const uint64_t total_saved = SavedBytes(m);
  Candidate best;
  std::string why = "no candidate plan";
  auto consider = [&](Result<Plan> p, const std::string& note) {
    if (!p.ok()) {
      why = p.status().message();
      return;
    }
    p->strategy = "karma";
    p->note = note;
    p->managed_memory = true;  // KARMA runs over managed memory, whichever candidate wins
    KeepFaster(best, std::move(p).value(), in);
  };
  // Problem 1 is solved under two assumptions about problem 2 at layer granularity (none, or the one the plan
  // uses), which changes how many blocks must leave; identical decisions are simulated once.
  const std::span<const KarmaPlanOptions> layer_options = KarmaLayerOptions();
  // Blocks start at value cuts, or only where whole buffers allow (the coarser blocks of memory a caching
  // allocator reuses within the forward pass, whose recomputes do not write over the next block's memory).
  std::set<std::pair<std::vector<uint32_t>, size_t>> tried;
  std::map<std::tuple<uint32_t, double, bool, bool>, std::vector<Block>> blockings;  // (blocks, assumed options)
  const std::vector<bool> kinds = CutKinds(m);
  for (size_t li = 0; li < layer_options.size(); ++li) {
    const KarmaPlanOptions& lo = layer_options[li];
    for (uint32_t nblocks : KarmaBlockCounts()) {
      const uint64_t target = total_saved / nblocks;
      for (const bool whole : kinds) {
        for (const KarmaPlanOptions& assumed : {KarmaPlanOptions{}, lo}) {
          const auto key =
              std::make_tuple(nblocks, assumed.cheap_recompute_ratio, assumed.cheap_in_kept_blocks, whole);
          auto found = blockings.find(key);
          if (found == blockings.end()) {
            found = blockings.emplace(key, SolveBlocking(m, {target, 0, assumed, whole})).first;
          }
          const std::vector<Block>& base = found->second;
          for (double ratio : {0.0, 0.5, 1.0, 2.0, 8.0}) {
            std::vector<Block> blocks = base;
            SelectRecompute(m, blocks, {ratio});
            // Blockings from either kind of cut may share their modes: the starts tell them apart.
            std::vector<uint32_t> modes;
            for (const Block& blk : blocks) {
              modes.push_back(static_cast<uint32_t>(blk.mode));
              modes.push_back(blk.first_op);
            }
            modes.push_back(nblocks);
            if (!tried.insert({modes, li}).second) continue;
            consider(BuildKarmaPlan(m, blocks, lo),
                     fmt::format("{} blocks of ~{}{}, recompute below {}x swap-in{}", blocks.size(),
                                 FormatBytes(target), whole ? " (whole-buffer cuts)" : "", ratio,
                                 DescribeLayerOptions(lo)));
          }
        }
      }
    }
  }
  consider(PlanCheckpoint(in), "checkpointing only");
  consider(PlanCapacity(in), "capacity-based swapping only");  // last: its reason says where memory runs out
  if (best.plan.strategy.empty()) return Infeasible(why);
  if (!best.sim.feasible) return Infeasible(best.sim.reason);
  return best.plan;
}

}  // namespace karma::policy
