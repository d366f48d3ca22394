// The earlier out-of-core methods KARMA is compared with, each after its paper: vDNN, SuperNeurons, Chen et
// al.'s checkpointing, and capacity-based swapping.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "policy/planning_model.h"
#include "policy/strategies.h"
#include "ground/common/units.h"

namespace karma::policy {
namespace {

// The layer that runs right before `layer` (the one whose start triggers a one-layer-ahead prefetch).
int32_t StartOfPreviousLayer(const PlanningModel& m, uint32_t layer) {
  if (layer == 0) return kAtStart;
  const uint32_t first = m.layers[layer - 1].first;
  return first == 0 ? kAtStart : static_cast<int32_t>(first) - 1;
}

// The last forward op that writes b (kNone: none).
uint32_t LastForwardWrite(const PlanningModel& m, trace::BufferId b) {
  uint32_t last = trace::kNone;
  for (uint32_t w : m.writers[b]) {
    if (w < m.forward_end) last = w;
  }
  return last;
}

// vDNN, SuperNeurons and checkpointing allocate device memory explicitly (cudaMalloc, their own pools): an op
// whose buffers exceed the capacity cannot run at all, whatever moves around it.
Status CheckOpsFit(const SimInput& in) {
  const LargestOp big = FindLargestOp(*in.it, in.access);
  if (big.op == trace::kNone || big.bytes <= in.capacity) return Status::Ok();
  return Infeasible(fmt::format("op {} ({}) alone touches {}, more than the capacity {}; this strategy allocates "
                                "device memory explicitly, so nothing can page it", big.op, in.it->ops[big.op].name,
                                FormatBytes(big.bytes), FormatBytes(in.capacity)));
}

std::vector<uint32_t> ForwardLayers(const PlanningModel& m) {
  std::vector<uint32_t> fl;
  for (uint32_t l = 0; l < m.layers.size(); ++l) {
    if (m.layers[l].phase == trace::Phase::kForward) fl.push_back(l);
  }
  return fl;
}

// vDNN (Rhu et al., MICRO 2016), one memory-transfer policy. Forward: the input feature maps of a layer are
// offloaded to host memory while the layer computes (vDNN_all: every layer; vDNN_conv: CONV layers only) and
// released once the last forward layer that reads them is done; the next layer starts only when the offload
// has finished (the memory stream is synchronized at the end of every layer). Backward: when layer l+1 starts
// its backward pass the offloaded inputs of layer l are prefetched, and layer l waits for them. Weights,
// gradients and workspaces stay on the device.
Result<Plan> VdnnPolicy(const PlanningModel& m, bool conv_only) {
  const SimInput& in = *m.in;
  PlanBuilder b(in, "vdnn");
  const std::vector<uint32_t> fl = ForwardLayers(m);
  std::vector<bool> offloaded(in.it->buffers.size(), false);
  for (size_t i = 0; i < fl.size(); ++i) {
    const Layer& layer = m.layers[fl[i]];
    if (conv_only && !IsComputeIntensive(layer.kind)) continue;
    const uint32_t next_layer_start = i + 1 < fl.size() ? m.layers[fl[i + 1]].first : trace::kNone;
    for (uint32_t op = layer.first; op <= layer.last; ++op) {
      for (trace::BufferId x : in.access.ops[op].reads) {
        if (!m.saved[x] || offloaded[x] || m.writers[x].empty() || m.writers[x].front() >= layer.first) continue;
        offloaded[x] = true;
        const uint32_t last_write = LastForwardWrite(m, x);
        PlanBuilder::Eviction e;
        e.buffer = x;
        e.after = static_cast<int32_t>(m.last_forward_use[x]);
        e.need = m.first_later_use[x];
        // The copy runs alongside the layer, after the last write to the input (an in-place layer may write it).
        e.writeback_after = std::max<int32_t>(static_cast<int32_t>(layer.first) - 1,
                                              last_write == trace::kNone ? kAtStart : static_cast<int32_t>(last_write));
        e.writeback_after = std::min(e.writeback_after, e.after);
        if (next_layer_start != trace::kNone && static_cast<int32_t>(next_layer_start) > e.writeback_after) {
          e.sync_before = next_layer_start;
        }
        const uint32_t use_layer = m.layer_of_op[e.need];
        e.prefetch_after = StartOfPreviousLayer(m, use_layer);
        e.wait_before = m.layers[use_layer].first;
        b.Evict(e);
      }
    }
  }
  return b.Finish(in.capacity);
}

// SuperNeurons (Wang et al., PPoPP 2018) segments: runs of cheap layers after each checkpoint (CONV) layer.
struct SnSegment {
  std::vector<trace::BufferId> dropped;
  uint32_t first_need = trace::kNone;
};

Result<Plan> SuperNeuronsPolicy(const PlanningModel& m, bool speed_centric, bool keep_skips) {
  const SimInput& in = *m.in;
  const size_t nbuf = in.it->buffers.size();
  PlanBuilder b(in, "superneurons");
  // Cost-aware recomputation: outputs of cheap layers are dropped after the forward pass and recomputed from
  // the nearest checkpoint layer's output; CONV (compute-intensive) outputs are the checkpoints.
  // A tensor belongs to the layer that produced it (an in-place activation after a CONV layer leaves it a
  // CONV output). Segments run from one checkpoint layer to the next. The paper does not say how a cheap
  // output read beyond the next checkpoint layer (a skip connection) is treated: either it is dropped too
  // (recompute then reaches back through the join) or it stays; both are tried and the faster is used.
  std::vector<uint32_t> segment_of(m.forward_end, 0);
  for (uint32_t op = 0, seg = 0; op < m.forward_end; ++op) {
    if (op > 0 && IsComputeIntensive(in.access.kinds[op])) ++seg;
    segment_of[op] = seg;
  }
  std::vector<bool> dropped(nbuf, false), checkpoint(nbuf, false);
  for (size_t x = 0; x < nbuf; ++x) {
    if (!m.saved[x] || m.writers[x].empty()) continue;
    const uint32_t producer = m.writers[x].front();
    const uint32_t w = LastForwardWrite(m, static_cast<trace::BufferId>(x));
    if (IsComputeIntensive(in.access.kinds[producer])) checkpoint[x] = true;
    else if (w != trace::kNone && in.access.recomputable[w] &&
             (!keep_skips || segment_of[m.last_forward_use[x]] <= segment_of[producer] + 1)) {
      dropped[x] = true;
    }
  }
  // Recompute starts from what is still there: kept and offloaded outputs (values that died in the forward
  // pass are not).
  std::vector<bool> available(nbuf);
  for (size_t x = 0; x < nbuf; ++x) available[x] = m.saved[x] && !dropped[x];
  std::vector<SnSegment> segments;
  int current = -1;
  for (uint32_t op = 0; op < m.forward_end; ++op) {
    if (IsComputeIntensive(in.access.kinds[op]) || current < 0) {
      segments.emplace_back();
      current = static_cast<int>(segments.size()) - 1;
    }
    for (trace::BufferId x : in.access.ops[op].writes) {
      if (!dropped[x] || LastForwardWrite(m, x) != op) continue;
      SnSegment& s = segments[static_cast<size_t>(current)];
      s.dropped.push_back(x);
      s.first_need = std::min(s.first_need, m.first_later_use[x]);
    }
  }
  for (const SnSegment& s : segments) {
    if (s.dropped.empty()) continue;
    if (speed_centric) {
      // Speed-centric: the segment is recomputed once, before its first backward use, and kept until done.
      RecomputeSet r = ResolveRecomputeKeeping(m, s.dropped, s.first_need, available);
      for (trace::BufferId x : r.kept) available[x] = true;
      if (r.rebuilt.empty()) continue;
      uint32_t need = trace::kNone;
      for (trace::BufferId x : r.rebuilt) need = std::min(need, m.first_later_use[x]);
      b.Recompute(std::move(r.ops), need);
      for (trace::BufferId x : r.rebuilt) DropForRecompute(m, b, x);
    } else {
      // Memory-centric: each dropped output is recomputed from the checkpoint right before it is needed.
      for (trace::BufferId x : s.dropped) {
        auto ops = ResolveRecompute(m, {x}, m.first_later_use[x], available);
        if (!ops.ok()) {
          available[x] = true;  // kept, like a checkpoint
          continue;
        }
        b.Recompute(std::move(ops).value(), m.first_later_use[x]);
        DropForRecompute(m, b, x);
      }
    }
  }
  // Unified tensor pool with an LRU tensor cache: CONV outputs stay on the device while they fit; when memory
  // runs out the least recently used are offloaded, and the backward pass prefetches them one layer ahead.
  std::vector<Gap> gaps;
  for (Gap g : FindGaps(m, b, false)) {
    if (!checkpoint[g.buffer] || g.after >= static_cast<int32_t>(m.forward_end)) continue;
    g.order = g.after;
    g.prefetch_after = StartOfPreviousLayer(m, m.layer_of_op[g.need]);
    gaps.push_back(g);
  }
  KARMA_RETURN_IF_ERROR(EvictGreedily(m, b, std::move(gaps), in.capacity));
  return b.Finish(in.capacity);
}

// Chen et al. 2016 segmentation for one budget: returns the ops where segments start.
std::vector<uint32_t> ChenCuts(const PlanningModel& m, const std::vector<uint64_t>& saved_by_layer,
                               const std::vector<uint32_t>& fl, double budget) {
  std::vector<uint32_t> cuts = {0};
  double acc = 0;
  for (uint32_t l : fl) {
    const uint32_t first = m.layers[l].first;
    if (acc > budget && m.clean_cut[first]) {
      cuts.push_back(first);
      acc = 0;
    }
    acc += static_cast<double>(saved_by_layer[l]);
  }
  return cuts;
}

Result<Plan> CheckpointWithCuts(const PlanningModel& m, const std::vector<uint32_t>& cuts) {
  const SimInput& in = *m.in;
  const size_t nbuf = in.it->buffers.size();
  PlanBuilder b(in, "checkpoint");
  // What crosses a cut is the checkpoint and stays; every other saved value is dropped and recomputed.
  std::vector<bool> keep(nbuf, false), dropped(nbuf, false);
  for (size_t x = 0; x < nbuf; ++x) {
    if (in.access.persistent[x] || m.writers[x].empty() || m.last_forward_use[x] == trace::kNone) continue;
    const uint32_t first_write = m.writers[x].front();
    for (uint32_t c : cuts) {
      if (first_write < c && c <= m.last_forward_use[x]) keep[x] = true;
    }
  }
  std::vector<std::vector<trace::BufferId>> targets(cuts.size());
  for (size_t x = 0; x < nbuf; ++x) {
    if (!m.saved[x] || keep[x]) continue;
    const uint32_t w = LastForwardWrite(m, static_cast<trace::BufferId>(x));
    if (w == trace::kNone || !in.access.recomputable[w]) continue;
    dropped[x] = true;
    const size_t seg = static_cast<size_t>(std::upper_bound(cuts.begin(), cuts.end(), w) - cuts.begin()) - 1;
    targets[seg].push_back(static_cast<trace::BufferId>(x));
  }
  std::vector<bool> available(nbuf);
  for (size_t x = 0; x < nbuf; ++x) available[x] = keep[x] || (m.saved[x] && !dropped[x]);
  for (const std::vector<trace::BufferId>& t : targets) {
    if (t.empty()) continue;
    uint32_t need = trace::kNone;
    for (trace::BufferId x : t) need = std::min(need, m.first_later_use[x]);
    // Values that cannot be rebuilt without disturbing a checkpoint stay, like checkpoints.
    RecomputeSet r = ResolveRecomputeKeeping(m, t, need, available);
    for (trace::BufferId x : r.kept) available[x] = true;
    if (r.rebuilt.empty()) continue;
    need = trace::kNone;
    for (trace::BufferId x : r.rebuilt) need = std::min(need, m.first_later_use[x]);
    b.Recompute(std::move(r.ops), need);
    for (trace::BufferId x : r.rebuilt) DropForRecompute(m, b, x);
  }
  return b.Finish(in.capacity);
}

}  // namespace

Result<Plan> PlanVdnn(const SimInput& in) {
  // vDNN_dyn: the fastest of the policies that fit (in-core first, then vDNN_conv, then vDNN_all).
  KARMA_RETURN_IF_ERROR(CheckOpsFit(in));
  const PlanningModel m = BuildPlanningModel(in);
  Candidate best;
  std::string why;
  Result<Plan> incore = PlanInCore(in);
  if (incore.ok()) {
    incore->strategy = "vdnn";
    incore->note = "fits in core";
    KeepFaster(best, std::move(incore).value(), in);
  }
  for (bool conv_only : {true, false}) {
    Result<Plan> p = VdnnPolicy(m, conv_only);
    if (!p.ok()) continue;
    p->note = conv_only ? "vDNN_conv" : "vDNN_all";
    KeepFaster(best, std::move(p).value(), in);
  }
  if (best.plan.strategy.empty()) return Infeasible("vDNN made no plan");
  if (!best.sim.feasible) return Infeasible("no vDNN policy fits: " + best.sim.reason);
  return best.plan;
}

Result<Plan> PlanSuperNeurons(const SimInput& in) {
  KARMA_RETURN_IF_ERROR(CheckOpsFit(in));
  const PlanningModel m = BuildPlanningModel(in);
  Candidate best;
  std::string why = "no plan";
  for (bool keep_skips : {false, true}) {
    // Cost-aware recomputation prefers speed-centric and falls back to memory-centric when the peak is too high.
    for (bool speed : {true, false}) {
      Result<Plan> p = SuperNeuronsPolicy(m, speed, keep_skips);
      if (!p.ok()) {
        why = p.status().message();
        continue;
      }
      p->note = fmt::format("{} recomputation{}", speed ? "speed-centric" : "memory-centric",
                            keep_skips ? ", skip inputs kept" : "");
      SimResult s = Simulate(in, *p);
      if (!s.feasible) {
        why = s.reason;
        continue;
      }
      KeepFaster(best, std::move(p).value(), in);
      break;
    }
  }
  if (best.plan.strategy.empty()) return Infeasible(why);
  return best.plan;
}

Result<Plan> PlanCheckpoint(const SimInput& in) {
  KARMA_RETURN_IF_ERROR(CheckOpsFit(in));
  const PlanningModel m = BuildPlanningModel(in);
  const std::vector<uint32_t> fl = ForwardLayers(m);
  std::vector<uint64_t> saved_by_layer(m.layers.size(), 0);
  uint64_t total = 0;
  for (size_t x = 0; x < in.it->buffers.size(); ++x) {
    if (!m.saved[x]) continue;
    const uint32_t w = LastForwardWrite(m, static_cast<trace::BufferId>(x));
    if (w == trace::kNone) continue;
    saved_by_layer[m.layer_of_op[w]] += in.it->buffers[x].bytes;
    total += in.it->buffers[x].bytes;
  }
  // Chen et al. pick the budget B = sqrt(x·y) from a first pass; a grid of budgets total/k around sqrt(N)
  // covers that choice and its neighbours. The fastest plan that fits wins.
  Candidate best;
  std::string why = "no segmentation fits";
  const double n = static_cast<double>(std::max<size_t>(fl.size(), 1));
  std::vector<std::vector<uint32_t>> tried;
  for (double k = 1; k <= n; k *= 1.25) {
    std::vector<uint32_t> cuts = ChenCuts(m, saved_by_layer, fl, static_cast<double>(total) / k);
    if (std::find(tried.begin(), tried.end(), cuts) != tried.end()) continue;
    tried.push_back(cuts);
    Result<Plan> p = CheckpointWithCuts(m, cuts);
    if (!p.ok()) {
      why = p.status().message();
      continue;
    }
    const std::vector<uint64_t> mem = StaticMemory(in, *p);
    if (!mem.empty() && *std::max_element(mem.begin(), mem.end()) > in.capacity) {
      why = fmt::format("the smallest peak over the budgets tried is above the capacity {}",
                        FormatBytes(in.capacity));
      continue;
    }
    p->note = fmt::format("{} segments (budget {})", cuts.size(), FormatBytes(total / static_cast<uint64_t>(k)));
    KeepFaster(best, std::move(p).value(), in);
  }
  if (best.plan.strategy.empty() || !best.sim.feasible) {
    return Infeasible(best.plan.strategy.empty() ? why : best.sim.reason);
  }
  return best.plan;
}

// Capacity-based swapping (the KARMA paper's swapping component without recompute): everything that fits
// stays; what does not is swapped out in forward order — the earliest data, needed last in backward, first —
// and prefetched first-in first-out as early as the capacity allows. Persistent data (weights, gradients,
// optimizer state) is swapped too when the activations alone cannot make room, dead values (gradients before
// they are produced) first since dropping them costs no transfer. It runs over managed memory (the KARMA paper's
// runtime): an op larger than the capacity runs paged, with everything else evicted before it.
Result<Plan> PlanCapacity(const SimInput& in) {
  const PlanningModel m = BuildPlanningModel(in);
  PlanBuilder b(in, "capacity");
  b.set_managed_memory(true);
  std::vector<Gap> gaps = FindGaps(m, b, true);
  for (Gap& g : gaps) {
    const bool persistent = in.access.persistent[g.buffer];
    if (!persistent) {
      g.cls = 0;
      g.order = g.after;
    } else if (g.wrap && in.access.dead_at_wrap[g.buffer]) {
      g.cls = 0;
      g.order = -1;
    } else {
      g.cls = 1;
      // Data first needed late (optimizer state) leaves first; weights' inner gaps in forward order.
      g.order = g.wrap ? -static_cast<int64_t>(g.hi1) : g.after;
    }
  }
  KARMA_RETURN_IF_ERROR(EvictGreedily(m, b, std::move(gaps), in.capacity));
  return b.Finish(in.capacity);
}

}  // namespace karma::policy
