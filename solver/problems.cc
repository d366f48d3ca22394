// Candidate layers, the coefficients of problems 1 and 2 (measured with policy's plan builder), and their models.
#include "solver/problems.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>

#include "policy/plan_builder.h"

namespace karma::solver {
namespace {

using policy::Block;
using policy::BlockMode;
using policy::PlanBuilder;

// Objective weights besides seconds of stall and recompute: a transfer that hides completely still occupies the
// link (prefer evicting less), and fewer, larger blocks read better (the paper's stages); both only break ties.
constexpr double kTransferWeight = 1e-3;
constexpr double kBlockWeight = 1e-4;  // in ms

// The models count time in milliseconds and memory in GiB, so that GLPK sees coefficients near 1.
constexpr double kMs = 1e3;
constexpr double kPerGiB = 1.0 / (1ull << 30);

// Backward compute from the end of the forward pass up to (not including) op `need`.
double WaitBefore(const policy::PlanningModel& m, uint32_t need) {
  const std::vector<double>& t = m.in->op_seconds;
  double s = 0;
  const uint32_t end = std::min<uint32_t>(need, static_cast<uint32_t>(t.size()));
  for (uint32_t op = m.forward_end; op < end; ++op) s += t[op];
  return s;
}

// Indices ordered by when their data is first needed back (first needed first).
std::vector<size_t> ByNeed(const std::vector<uint32_t>& need) {
  std::vector<size_t> order(need.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return need[a] < need[b]; });
  return order;
}

// max(0, max over rows of (sum - available)): the least a stall column can be for given decisions.
double LeastStall(const std::vector<double>& rows) {
  double s = 0;
  for (double r : rows) s = std::max(s, r);
  return s;
}

}  // namespace

std::vector<CandidateLayer> CandidateLayers(const policy::PlanningModel& m, size_t max_layers,
                                            const std::vector<uint32_t>& required_starts, bool whole_buffers) {
  const policy::SimInput& in = *m.in;
  std::vector<uint64_t> saved_at(m.forward_end, 0);
  uint64_t total = 0;
  for (size_t x = 0; x < in.it->buffers.size(); ++x) {
    const uint32_t w = in.access.forward_writer[x];
    if (!m.saved[x] || w == trace::kNone || w >= m.forward_end) continue;
    saved_at[w] += in.it->buffers[x].bytes;
    total += in.it->buffers[x].bytes;
  }
  const uint64_t step = std::max<uint64_t>(1, total / std::max<size_t>(max_layers, 1));
  std::vector<uint32_t> required = required_starts;
  std::sort(required.begin(), required.end());
  const std::vector<uint32_t> cuts = policy::BlockCuts(m, whole_buffers);
  std::vector<CandidateLayer> layers;
  uint64_t acc = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    const uint32_t c = cuts[i];
    if (layers.empty() || acc >= step || std::binary_search(required.begin(), required.end(), c)) {
      if (!layers.empty()) layers.back().last_op = c - 1;
      layers.push_back({c, c, 0, 0});
      acc = 0;
    }
    const uint32_t end = i + 1 < cuts.size() ? cuts[i + 1] : m.forward_end;
    for (uint32_t op = c; op < end; ++op) {
      layers.back().forward_s += in.op_seconds[op];
      layers.back().saved_bytes += saved_at[op];
      acc += saved_at[op];
    }
  }
  if (!layers.empty()) layers.back().last_op = m.forward_end - 1;
  return layers;
}

std::vector<Block> BlocksOfLayers(const policy::PlanningModel& m, const std::vector<CandidateLayer>& layers,
                                  const std::vector<bool>& starts, const std::vector<bool>& evicted) {
  std::vector<uint32_t> ops;
  std::vector<bool> modes;
  for (size_t l = 0; l < layers.size(); ++l) {
    if (l == 0 || starts[l]) {
      ops.push_back(layers[l].first_op);
      modes.push_back(evicted[l]);
    }
  }
  std::vector<Block> blocks = policy::BlocksFromCuts(m, ops);
  for (size_t i = 0; i < blocks.size() && i < modes.size(); ++i) {
    blocks[i].mode = modes[i] ? BlockMode::kSwap : BlockMode::kKeep;
  }
  return blocks;
}

BlockingData MeasureBlocking(const policy::PlanningModel& m, std::vector<CandidateLayer> layers,
                             const std::vector<Block>& reference, const policy::KarmaPlanOptions& options) {
  const policy::SimInput& in = *m.in;
  const size_t n = layers.size(), nops = in.it->ops.size();
  BlockingData d;
  d.layers = std::move(layers);
  // The reference blocks all kept and all evicted; what each eviction or recompute concerns is charged to the
  // candidate layer whose ops wrote it. (Block boundaries matter only through what crosses them; measuring on a
  // blocking close to the solution keeps that effect near right.)
  std::vector<Block> kept = reference, evicted = reference;
  for (Block& b : kept) b.mode = BlockMode::kKeep;
  for (Block& b : evicted) b.mode = BlockMode::kSwap;
  const PlanBuilder b_kept = policy::KarmaBlockDecisions(m, kept, options);
  const PlanBuilder b_evicted = policy::KarmaBlockDecisions(m, evicted, options);
  std::vector<int> layer_of_op(nops, -1);
  for (size_t l = 0; l < n; ++l) {
    for (uint32_t op = d.layers[l].first_op; op <= d.layers[l].last_op && op < nops; ++op) {
      layer_of_op[op] = static_cast<int>(l);
    }
  }
  auto layer_of = [&](const PlanBuilder::Eviction& e) {
    const uint32_t w = in.access.forward_writer[e.buffer];
    return e.block < 0 || w == trace::kNone || w >= nops ? -1 : layer_of_op[w];
  };

  // What evicting a layer frees at each op: its evictions' windows when all are evicted, less what the kept
  // plan already drops (cheap layers rebuilt in kept blocks).
  std::vector<std::vector<double>> relief(n, std::vector<double>(nops + 1, 0.0));
  std::vector<double> out_bytes(n, 0.0);
  d.need.assign(n, trace::kNone);
  d.rebuild_s.assign(n, 0.0);
  std::vector<bool> block_buffer(in.it->buffers.size(), false);
  auto add = [&](const PlanBuilder::Eviction& e, double sign) {
    if (layer_of(e) < 0) return;
    const size_t l = static_cast<size_t>(layer_of(e));
    const double bytes = static_cast<double>(in.it->buffers[e.buffer].bytes);
    const size_t lo = static_cast<size_t>(e.after + 1);
    const size_t hi = std::min<size_t>(e.need == trace::kNone ? nops : e.need, nops);
    if (lo >= hi) return;
    relief[l][lo] += sign * bytes;
    relief[l][hi] -= sign * bytes;
  };
  for (const PlanBuilder::Eviction& e : b_evicted.evictions()) {
    add(e, 1);
    if (layer_of(e) < 0) continue;
    const size_t l = static_cast<size_t>(layer_of(e));
    block_buffer[e.buffer] = true;
    if (!e.recomputed) out_bytes[l] += static_cast<double>(in.it->buffers[e.buffer].MovedBytes());
    d.need[l] = std::min(d.need[l], e.need);
  }
  for (const PlanBuilder::Eviction& e : b_kept.evictions()) add(e, -1);
  for (const auto* b : {&b_evicted, &b_kept}) {
    const double sign = b == &b_evicted ? 1 : -1;
    for (const policy::Action& a : b->recomputes()) {
      for (trace::OpId op : a.ops) {
        if (op < nops && layer_of_op[op] >= 0) d.rebuild_s[static_cast<size_t>(layer_of_op[op])] += sign * in.op_seconds[op];
      }
    }
  }
  for (size_t l = 0; l < n; ++l) {
    for (size_t j = 1; j <= nops; ++j) relief[l][j] += relief[l][j - 1];
    d.rebuild_s[l] = std::max(0.0, d.rebuild_s[l]);
    d.out_s.push_back(out_bytes[l] / in.hw.d2h_bw());
    d.in_s.push_back(out_bytes[l] / in.hw.h2d_bw());
    d.wait_s.push_back(d.need[l] == trace::kNone ? 0.0 : WaitBefore(m, d.need[l]));
  }
  d.round_trip_s_per_byte = 1 / in.hw.d2h_bw() + 1 / in.hw.h2d_bw();

  // Memory checkpoints: every op where the all-kept plan is above its limit, with the other evictable data there.
  const std::vector<policy::ComputeItem> seq = b_kept.Sequence();
  const std::vector<uint32_t> pos = policy::OpPositions(seq, nops);
  const std::vector<uint64_t> mem = b_kept.LatestRestoreMemory();
  const policy::ItemLimits limits = policy::CapacityLimits(in, seq, in.capacity, true);
  std::vector<double> residual(seq.size() + 1, 0.0);
  for (const policy::Gap& g : policy::FindGaps(m, b_kept, true)) {
    // A layer's evictions free its data from its last forward use to its first use after it; its other gaps (a
    // skip value waiting for the op that reads it again, a value between two backward uses) are other data that
    // capacity-based eviction may free.
    if (block_buffer[g.buffer] && (g.wrap || g.after == static_cast<int32_t>(m.last_forward_use[g.buffer]))) continue;
    const double bytes = static_cast<double>(g.bytes);
    for (const auto& [lo, hi] : {std::pair{g.lo1, g.hi1}, std::pair{g.lo2, g.hi2}}) {
      if (hi < lo) continue;
      residual[static_cast<size_t>(lo)] += bytes;
      residual[static_cast<size_t>(hi) + 1] -= bytes;
    }
  }
  for (size_t k = 1; k <= seq.size(); ++k) residual[k] += residual[k - 1];
  // One row per distinct relief pattern: the op with the largest demand, and the one with the largest demand
  // beyond what other data could free.
  std::vector<BlockingData::Point> candidates;
  std::map<std::vector<std::pair<size_t, int64_t>>, std::pair<size_t, size_t>> best;
  for (uint32_t j = 0; j < nops; ++j) {
    const size_t k = pos[j];
    if (mem[k] <= limits.hard[k]) continue;
    BlockingData::Point p;
    p.op = j;
    p.demand = static_cast<double>(mem[k] - limits.hard[k]);
    p.residual = std::max(0.0, residual[k]);
    std::vector<std::pair<size_t, int64_t>> key;
    for (size_t l = 0; l < n; ++l) {
      if (relief[l][j] < 1) continue;
      p.relief.emplace_back(l, relief[l][j]);
      key.emplace_back(l, static_cast<int64_t>(relief[l][j]));
    }
    const size_t i = candidates.size();
    candidates.push_back(std::move(p));
    auto [it, fresh] = best.try_emplace(std::move(key), i, i);
    if (fresh) continue;
    auto excess = [&](size_t c) { return candidates[c].demand - candidates[c].residual; };
    if (candidates[i].demand > candidates[it->second.first].demand) it->second.first = i;
    if (excess(i) > excess(it->second.second)) it->second.second = i;
  }
  std::vector<size_t> chosen;
  for (const auto& [key, pick] : best) {
    chosen.push_back(pick.first);
    if (pick.second != pick.first) chosen.push_back(pick.second);
  }
  std::sort(chosen.begin(), chosen.end());
  std::vector<BlockingData::Point> points;
  for (size_t i : chosen) points.push_back(std::move(candidates[i]));
  d.points = std::move(points);
  return d;
}

Result<BlockingModel> BuildBlockingModel(const BlockingData& d, uint64_t max_block_bytes) {
  BlockingModel bm;
  MipModel& mip = bm.mip;
  const size_t n = d.layers.size();
  bm.start.assign(n, -1);
  bm.evicted.assign(n, -1);
  using Kind = MipModel::Kind;
  for (size_t l = 0; l < n; ++l) {
    bm.evicted[l] = mip.AddColumn(fmt::format("e{}", l), Kind::kBinary, 0, 1,
                                  kMs * (d.rebuild_s[l] + kTransferWeight * d.in_s[l]));
    if (l > 0) bm.start[l] = mip.AddColumn(fmt::format("c{}", l), Kind::kBinary, 0, 1, kBlockWeight);
  }
  bm.stall_out = mip.AddColumn("S_out", Kind::kContinuous, 0, kInf, 1);
  bm.stall_in = mip.AddColumn("S_in", Kind::kContinuous, 0, kInf, 1);
  // Other data evicted to make room costs at least its trip out and back.
  bm.residual_max = mip.AddColumn("R", Kind::kContinuous, 0, kInf, kMs * d.round_trip_s_per_byte / kPerGiB);
  // A block is evicted or kept as a whole: the decision changes only where a block starts.
  for (size_t l = 1; l < n; ++l) {
    KARMA_RETURN_IF_ERROR(mip.AddRow(fmt::format("same_a{}", l),
                                     {{bm.evicted[l], 1}, {bm.evicted[l - 1], -1}, {bm.start[l], -1}}, -kInf, 0));
    KARMA_RETURN_IF_ERROR(mip.AddRow(fmt::format("same_b{}", l),
                                     {{bm.evicted[l - 1], 1}, {bm.evicted[l], -1}, {bm.start[l], -1}}, -kInf, 0));
  }
  // Blocks hold at most max_block_bytes: every shortest run of layers above it is cut somewhere inside.
  for (size_t a = 0; a < n; ++a) {
    uint64_t acc = d.layers[a].saved_bytes;
    for (size_t b = a + 1; b < n; ++b) {
      acc += d.layers[b].saved_bytes;
      if (acc <= max_block_bytes) continue;
      std::vector<std::pair<int, double>> cut;
      for (size_t w = a + 1; w <= b; ++w) cut.emplace_back(bm.start[w], 1);
      KARMA_RETURN_IF_ERROR(mip.AddRow(fmt::format("size{}", a), cut, 1, kInf));
      break;
    }
  }
  // Occupancy: swap-outs (first-in first-out on one engine) hide behind the forward compute after their layer,
  // swap-ins behind the backward compute before their data is needed; what does not hide stalls.
  double after = 0;
  for (size_t w = n; w-- > 0;) {
    if (d.out_s[w] > 0) {
      std::vector<std::pair<int, double>> terms = {{bm.stall_out, 1}};
      for (size_t v = w; v < n; ++v) {
        if (d.out_s[v] > 0) terms.emplace_back(bm.evicted[v], -kMs * d.out_s[v]);
      }
      KARMA_RETURN_IF_ERROR(mip.AddRow(fmt::format("out{}", w), terms, -kMs * after, kInf));
    }
    after += d.layers[w].forward_s;
  }
  const std::vector<size_t> order = ByNeed(d.need);
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t w = order[i];
    if (d.in_s[w] <= 0 || d.need[w] == trace::kNone) continue;
    std::vector<std::pair<int, double>> terms = {{bm.stall_in, 1}};
    for (size_t j = 0; j < order.size() && d.need[order[j]] <= d.need[w]; ++j) {
      if (d.in_s[order[j]] > 0) terms.emplace_back(bm.evicted[order[j]], -kMs * d.in_s[order[j]]);
    }
    KARMA_RETURN_IF_ERROR(mip.AddRow(fmt::format("in{}", w), terms, -kMs * d.wait_s[w], kInf));
  }
  return bm;
}

Status AddCheckpoints(const BlockingData& d, BlockingModel& bm, const std::vector<size_t>& points) {
  using Kind = MipModel::Kind;
  MipModel& mip = bm.mip;
  // No stage over capacity: at a memory checkpoint the evicted layers, and at most `residual` of other data, free
  // the demand.
  for (size_t p : points) {
    if (std::find(bm.points.begin(), bm.points.end(), p) != bm.points.end()) continue;
    const BlockingData::Point& pt = d.points[p];
    const int rho = mip.AddColumn(fmt::format("r{}", p), Kind::kContinuous, 0, kPerGiB * pt.residual, 0);
    bm.points.push_back(p);
    bm.residual.push_back(rho);
    std::vector<std::pair<int, double>> terms = {{rho, 1}};
    for (const auto& [l, bytes] : pt.relief) terms.emplace_back(bm.evicted[l], kPerGiB * bytes);
    KARMA_RETURN_IF_ERROR(mip.AddRow(fmt::format("cap_op{}", pt.op), terms, kPerGiB * pt.demand, kInf));
    KARMA_RETURN_IF_ERROR(mip.AddRow(fmt::format("rmax{}", p), {{bm.residual_max, 1}, {rho, -1}}, 0, kInf));
  }
  return Status::Ok();
}

namespace {

// Bytes a checkpoint still needs from other data with these layers evicted.
double Shortfall(const BlockingData::Point& p, const std::function<bool(size_t)>& evicted) {
  double freed = 0;
  for (const auto& [l, bytes] : p.relief) freed += evicted(l) ? bytes : 0.0;
  return p.demand - freed;
}

std::vector<size_t> Worst(const BlockingData& d, const std::function<double(const BlockingData::Point&)>& score,
                          size_t count) {
  std::vector<size_t> idx(d.points.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  count = std::min(count, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(count), idx.end(),
                    [&](size_t a, size_t b) { return score(d.points[a]) > score(d.points[b]); });
  idx.resize(count);
  return idx;
}

}  // namespace

std::vector<size_t> InitialCheckpoints(const BlockingData& d, const std::vector<bool>& evicted, size_t per_rule) {
  std::vector<size_t> all;
  for (const auto& score : std::initializer_list<std::function<double(const BlockingData::Point&)>>{
           [](const BlockingData::Point& p) { return p.demand; },
           [&](const BlockingData::Point& p) {
             return Shortfall(p, [&](size_t l) { return l < evicted.size() && evicted[l]; }) - p.residual;
           },
           [](const BlockingData::Point& p) { return Shortfall(p, [](size_t) { return true; }) - p.residual; }}) {
    for (size_t i : Worst(d, score, per_rule)) all.push_back(i);
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

std::vector<size_t> ViolatedCheckpoints(const BlockingData& d, const BlockingModel& bm, const std::vector<double>& x,
                                        size_t limit) {
  const double paid = x[static_cast<size_t>(bm.residual_max)] / kPerGiB;  // bytes of other data the cost covers
  std::vector<bool> has(d.points.size(), false);
  for (size_t p : bm.points) has[p] = true;
  std::vector<std::pair<double, size_t>> bad;
  for (size_t p = 0; p < d.points.size(); ++p) {
    if (has[p]) continue;
    const double need =
        Shortfall(d.points[p], [&](size_t l) { return x[static_cast<size_t>(bm.evicted[l])] > 0.5; });
    const double over = std::max(need - d.points[p].residual, need - paid);
    if (over > 1e-6 * std::max(1.0, d.points[p].demand)) bad.emplace_back(over, p);
  }
  std::sort(bad.begin(), bad.end(), std::greater<>());
  std::vector<size_t> out;
  for (size_t i = 0; i < bad.size() && i < limit; ++i) out.push_back(bad[i].second);
  return out;
}

std::vector<double> BlockingValues(const BlockingData& d, const BlockingModel& bm, const std::vector<bool>& starts,
                                   const std::vector<bool>& evicted) {
  const size_t n = d.layers.size();
  std::vector<double> x(static_cast<size_t>(bm.mip.columns()), 0.0);
  auto e = [&](size_t l) { return evicted[l] ? 1.0 : 0.0; };
  for (size_t l = 0; l < n; ++l) {
    x[static_cast<size_t>(bm.evicted[l])] = e(l);
    if (l > 0) x[static_cast<size_t>(bm.start[l])] = starts[l] ? 1.0 : 0.0;
  }
  std::vector<double> rows;
  double after = 0, out = 0;
  for (size_t w = n; w-- > 0;) {
    out += d.out_s[w] * e(w);
    if (d.out_s[w] > 0) rows.push_back(kMs * (out - after));
    after += d.layers[w].forward_s;
  }
  x[static_cast<size_t>(bm.stall_out)] = LeastStall(rows);
  rows.clear();
  const std::vector<size_t> order = ByNeed(d.need);
  for (size_t w : order) {
    if (d.in_s[w] <= 0 || d.need[w] == trace::kNone) continue;
    double sum = 0;
    for (size_t j = 0; j < order.size() && d.need[order[j]] <= d.need[w]; ++j) sum += d.in_s[order[j]] * e(order[j]);
    rows.push_back(kMs * (sum - d.wait_s[w]));
  }
  x[static_cast<size_t>(bm.stall_in)] = LeastStall(rows);
  double most = 0;
  for (size_t i = 0; i < bm.points.size(); ++i) {
    const BlockingData::Point& p = d.points[bm.points[i]];
    const double rho = kPerGiB * std::clamp(Shortfall(p, [&](size_t l) { return evicted[l]; }), 0.0, p.residual);
    x[static_cast<size_t>(bm.residual[i])] = rho;
    most = std::max(most, rho);
  }
  x[static_cast<size_t>(bm.residual_max)] = most;
  return x;
}

RecomputeData MeasureRecompute(const policy::PlanningModel& m, const std::vector<Block>& blocks) {
  const policy::SimInput& in = *m.in;
  RecomputeData d;
  std::vector<uint32_t> need(blocks.size(), trace::kNone);
  for (size_t x = 0; x < in.it->buffers.size(); ++x) {
    const uint32_t w = in.access.forward_writer[x];
    if (!m.saved[x] || w == trace::kNone) continue;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (w >= blocks[i].first_op && w <= blocks[i].last_op) need[i] = std::min(need[i], m.first_later_use[x]);
    }
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].mode == BlockMode::kKeep) continue;
    const policy::BlockFacts f = policy::FactsOf(m, blocks, i);
    double after = 0;
    for (uint32_t op = blocks[i].last_op + 1; op < m.forward_end; ++op) after += in.op_seconds[op];
    d.evicted.push_back(i);
    d.forward_after_s.push_back(after);
    d.recompute_s.push_back(f.dropped_bytes > 0 ? f.recompute_s : -1);
    d.out_s.push_back(static_cast<double>(f.saved_moved) / in.hw.d2h_bw());
    d.in_s.push_back(static_cast<double>(f.saved_moved) / in.hw.h2d_bw());
    d.dropped_out_s.push_back(static_cast<double>(f.dropped_moved) / in.hw.d2h_bw());
    d.dropped_in_s.push_back(static_cast<double>(f.dropped_moved) / in.hw.h2d_bw());
    d.need.push_back(need[i]);
    d.wait_s.push_back(need[i] == trace::kNone ? 0.0 : WaitBefore(m, need[i]));
  }
  return d;
}

Result<RecomputeModel> BuildRecomputeModel(const RecomputeData& d) {
  RecomputeModel rm;
  MipModel& mip = rm.mip;
  const size_t k = d.evicted.size();
  using Kind = MipModel::Kind;
  rm.recompute.assign(k, -1);
  for (size_t i = 0; i < k; ++i) {
    if (d.recompute_s[i] >= 0) {
      rm.recompute[i] = mip.AddColumn(fmt::format("rc{}", d.evicted[i]), Kind::kBinary, 0, 1, kMs * d.recompute_s[i]);
    }
  }
  rm.stall_out = mip.AddColumn("S_out", Kind::kContinuous, 0, kInf, 1);
  rm.stall_in = mip.AddColumn("S_in", Kind::kContinuous, 0, kInf, 1);
  // Swap-outs of the evicted blocks from block i on hide behind the forward compute after block i; a
  // recomputed block sends only what crosses into later blocks.
  for (size_t i = 0; i < k; ++i) {
    std::vector<std::pair<int, double>> terms = {{rm.stall_out, 1}};
    double sum = 0;
    for (size_t j = i; j < k; ++j) {
      sum += d.out_s[j];
      if (rm.recompute[j] >= 0) terms.emplace_back(rm.recompute[j], kMs * d.dropped_out_s[j]);
    }
    KARMA_RETURN_IF_ERROR(
        mip.AddRow(fmt::format("out{}", d.evicted[i]), terms, kMs * (sum - d.forward_after_s[i]), kInf));
  }
  // Swap-ins, in the order their data is needed, hide behind the backward compute before that point and the
  // recomputes that run there (each right before the backward pass of its block).
  const std::vector<size_t> order = ByNeed(d.need);
  for (size_t i : order) {
    if (d.need[i] == trace::kNone) continue;
    std::vector<std::pair<int, double>> terms = {{rm.stall_in, 1}};
    double sum = 0;
    for (size_t j : order) {
      if (d.need[j] > d.need[i]) break;
      sum += d.in_s[j];
      if (rm.recompute[j] < 0) continue;
      terms.emplace_back(rm.recompute[j],
                         kMs * (d.dropped_in_s[j] + (d.need[j] < d.need[i] ? d.recompute_s[j] : 0.0)));
    }
    KARMA_RETURN_IF_ERROR(mip.AddRow(fmt::format("in{}", d.evicted[i]), terms, kMs * (sum - d.wait_s[i]), kInf));
  }
  return rm;
}

std::vector<double> RecomputeValues(const RecomputeData& d, const RecomputeModel& rm, const std::vector<bool>& on) {
  const size_t k = d.evicted.size();
  std::vector<double> x(static_cast<size_t>(rm.mip.columns()), 0.0);
  auto r = [&](size_t i) { return rm.recompute[i] >= 0 && on[i] ? 1.0 : 0.0; };
  for (size_t i = 0; i < k; ++i) {
    if (rm.recompute[i] >= 0) x[static_cast<size_t>(rm.recompute[i])] = r(i);
  }
  std::vector<double> rows;
  for (size_t i = 0; i < k; ++i) {
    double sum = 0;
    for (size_t j = i; j < k; ++j) sum += d.out_s[j] - d.dropped_out_s[j] * r(j);
    rows.push_back(kMs * (sum - d.forward_after_s[i]));
  }
  x[static_cast<size_t>(rm.stall_out)] = LeastStall(rows);
  rows.clear();
  const std::vector<size_t> order = ByNeed(d.need);
  for (size_t i : order) {
    if (d.need[i] == trace::kNone) continue;
    double sum = 0;
    for (size_t j : order) {
      if (d.need[j] > d.need[i]) break;
      sum += d.in_s[j] - d.dropped_in_s[j] * r(j) - (d.need[j] < d.need[i] ? d.recompute_s[j] * r(j) : 0.0);
    }
    rows.push_back(kMs * (sum - d.wait_s[i]));
  }
  x[static_cast<size_t>(rm.stall_in)] = LeastStall(rows);
  return x;
}

}  // namespace karma::solver
