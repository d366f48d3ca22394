// The ILP planner: problem 1, then problem 2, over Planner I's grid; simulated against the heuristic plan.
#include "solver/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "policy/karma.h"
#include "ground/common/log.h"
#include "ground/common/units.h"
#include "solver/problems.h"

namespace karma::solver {
namespace {

using Clock = std::chrono::steady_clock;
using policy::Block;

// Problem 1's memory checkpoints: how many to start with per rule, how many violated ones to add per round, and
// how many rounds.
constexpr size_t kInitialCheckpoints = 24;
constexpr size_t kAddedCheckpoints = 32;
constexpr int kCheckpointRounds = 6;
using policy::BlockMode;
// A plan the local search finds replaces the best plan of the grid only when it simulates at least this much
// faster (skipnet, 256 MiB on 57.6 MiB: a neighbour 0.2% faster in simulation replayed 13% slower).
constexpr double kPolishGain = 0.95;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One GLPK solve with its share of the time left (`solves_left` still to come, this one included, each may
// use what the others before it left), counted in the report.
MipSolution Run(const MipModel& model, const SolverOptions& options, Clock::time_point deadline, int solves_left,
                SolveReport& r) {
  MipOptions mo;
  const double left = std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
  mo.time_limit_s = left / std::max(solves_left, 1);
  mo.mip_gap = options.mip_gap;
  mo.lp_iteration_limit = options.lp_iteration_limit;
  mo.progress = options.progress;
  mo.cancel = options.cancel;
  MipSolution s = model.Solve(mo);
  r.solves++;
  r.glpk_s += s.seconds;
  r.warm_starts += s.warm_start_accepted ? 1 : 0;
  if (s.outcome == MipOutcome::kOptimal) r.optimal++;
  else if (s.outcome == MipOutcome::kFeasible) r.feasible++;
  else r.failed++;
  return s;
}

// Builds and simulates the plan of one solution (once per option and blocking).
Status Consider(const policy::PlanningModel& m, const std::vector<Block>& blocks, size_t li, const MipSolution& s1,
                const MipSolution& s2, std::set<std::vector<uint64_t>>& tried, policy::Candidate& best,
                size_t& best_li) {
  std::vector<uint64_t> key = {li};
  for (const Block& b : blocks) {
    key.push_back((uint64_t{b.first_op} << 34) | (uint64_t{b.last_op} << 2) | static_cast<uint64_t>(b.mode));
  }
  if (!tried.insert(std::move(key)).second) return Status::Ok();
  const policy::KarmaPlanOptions& lo = policy::KarmaLayerOptions()[li];
  KARMA_ASSIGN_OR_RETURN(policy::Plan plan, policy::BuildKarmaPlan(m, blocks, lo));
  size_t evicted = 0, recomputed = 0;
  for (const Block& b : plan.blocks) {
    evicted += b.mode != BlockMode::kKeep;
    recomputed += b.mode == BlockMode::kRecompute;
  }
  plan.strategy = "karma";
  plan.managed_memory = true;
  plan.note = fmt::format("ILP: {} blocks ({} evicted, {} recomputed; problem 1 {}, problem 2 {}){}",
                          plan.blocks.size(), evicted, recomputed, Name(s1.outcome), Name(s2.outcome),
                          policy::DescribeLayerOptions(lo));
  if (policy::KeepFaster(best, std::move(plan), *m.in)) best_li = li;
  return Status::Ok();
}

std::string Describe(const MipSolution& s) {
  return s.message.empty() ? Name(s.outcome) : fmt::format("{}: {}", Name(s.outcome), s.message);
}

}  // namespace

const char* Name(SolverKind k) { return k == SolverKind::kHeuristic ? "heuristic" : "ilp"; }

bool ParseSolverKind(std::string_view s, SolverKind* out) {
  if (s == "heuristic") *out = SolverKind::kHeuristic;
  else if (s == "ilp") *out = SolverKind::kIlp;
  else return false;
  return true;
}

std::string SolveReport::Summary() const {
  if (kind == SolverKind::kHeuristic) return "heuristic (Planner I's search)";
  std::string s = fmt::format("ilp: {} GLPK solves ({} optimal, {} stopped early, {} without a solution) in {:.2f} s, "
                              "planning {:.2f} s", solves, optimal, feasible, failed, glpk_s, planning_s);
  if (heuristic_s >= 0) s += fmt::format("; heuristic {:.1f} ms", heuristic_s * 1e3);
  if (ilp_s >= 0) s += fmt::format(", best ILP plan {:.1f} ms", ilp_s * 1e3);
  if (neighbours > 0) {
    s += fmt::format(" ({} neighbours tried, fastest {:.1f} ms{})", neighbours, polished_s * 1e3,
                     polished_taken ? ": taken" : "");
  }
  if (!winner.empty()) s += fmt::format(": {} plan used", winner);
  if (!fallback.empty()) s += fmt::format(" (fallback: {})", fallback);
  return s;
}

Result<policy::Plan> PlanKarma(const policy::SimInput& in, const SolverOptions& options, SolveReport* report) {
  SolveReport local;
  SolveReport& r = report != nullptr ? *report : local;
  r = SolveReport{};
  r.kind = options.kind;
  const Clock::time_point start = Clock::now();
  Result<policy::Plan> heuristic = policy::PlanKarma(in);
  policy::SimResult heuristic_sim;
  if (heuristic.ok()) {
    heuristic_sim = policy::Simulate(in, *heuristic);
    if (heuristic_sim.feasible) r.heuristic_s = heuristic_sim.iteration_s;
  }
  auto done = [&](Result<policy::Plan> p, const char* winner) {
    r.winner = winner;
    r.planning_s = Since(start);
    return p;
  };
  if (options.kind == SolverKind::kHeuristic) return done(std::move(heuristic), "heuristic");
  if (heuristic.ok() && policy::PlanInCore(in).ok()) return done(std::move(heuristic), "heuristic");

  const policy::PlanningModel m = policy::BuildPlanningModel(in);
  const uint64_t total_saved = policy::SavedBytes(m);
  // The limit covers the whole plan: the ILP search (models, GLPK, plans, simulations) has what the heuristic left.
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.time_limit_s));
  int skipped = 0;
  policy::Candidate best;
  size_t best_li = 0;
  std::set<std::vector<uint64_t>> tried;  // (option, blocks with modes) already built and simulated
  const std::span<const policy::KarmaPlanOptions> layer_options = policy::KarmaLayerOptions();
  // Each (option, block count) with layers from the value cuts and, where they differ (memory a caching
  // allocator reuses within the forward pass), from the buffer cuts only (policy::BlockingOptions::whole_buffers),
  // one after the other, so that a time limit leaves out as many of either. Two problems per setting.
  const std::span<const uint32_t> counts = policy::KarmaBlockCounts();
  const std::vector<bool> kinds = policy::CutKinds(m);
  const int settings = static_cast<int>(kinds.size() * layer_options.size() * counts.size());
  const int planned = 2 * settings;
  for (size_t setting = 0; setting < static_cast<size_t>(settings); ++setting) {
    const bool whole = kinds[setting % kinds.size()];
    const size_t li = setting / kinds.size() / counts.size();
    const uint32_t nblocks = counts[setting / kinds.size() % counts.size()];
    const policy::KarmaPlanOptions& lo = layer_options[li];
    const std::string what =
        fmt::format("{} blocks{}{}", nblocks, whole ? " (whole-buffer cuts)" : "", policy::DescribeLayerOptions(lo));
    if (Clock::now() >= deadline || Cancelled(options.cancel)) {
      ++skipped;
      continue;
    }
    const uint64_t target = total_saved / nblocks;
    // Problem 1, warm-started from the heuristic's blocking for the same target and option.
    const std::vector<Block> warm = policy::SolveBlocking(m, {target, 0, lo, whole});
    std::vector<uint32_t> warm_starts;
    for (const Block& b : warm) warm_starts.push_back(b.first_op);
    const BlockingData data =
        MeasureBlocking(m, CandidateLayers(m, options.max_layers, warm_starts, whole), warm, lo);
    uint64_t cap = 2 * target;
    for (const Block& b : warm) {
      uint64_t bytes = 0;
      for (const CandidateLayer& l : data.layers) {
        if (l.first_op >= b.first_op && l.last_op <= b.last_op) bytes += l.saved_bytes;
      }
      cap = std::max(cap, bytes);
    }
    Result<BlockingModel> p1 = BuildBlockingModel(data, cap);
    if (!p1.ok()) {
      r.failures.push_back(fmt::format("problem 1 ({}): {}", what, p1.status().message()));
      r.failed++;
      continue;
    }
    const size_t n = data.layers.size();
    std::vector<bool> warm_start(n, false), warm_evicted(n, false);
    for (size_t l = 0, b = 0; l < n; ++l) {
      while (b + 1 < warm.size() && warm[b + 1].first_op <= data.layers[l].first_op) ++b;
      warm_start[l] = warm[b].first_op == data.layers[l].first_op;
      warm_evicted[l] = warm[b].mode != BlockMode::kKeep;
    }
    // Memory checkpoints as rows only where they bind: solve, add the ones the solution violates, again.
    Status rows = AddCheckpoints(data, *p1, InitialCheckpoints(data, warm_evicted, kInitialCheckpoints));
    MipSolution s1;
    for (int round = 0; rows.ok() && round < kCheckpointRounds; ++round) {
      if (options.warm_start) p1->mip.SetWarmStart(BlockingValues(data, *p1, warm_start, warm_evicted));
      s1 = Run(p1->mip, options, deadline, std::max(1, planned - r.solves), r);
      if (!s1.has_solution()) break;
      const std::vector<size_t> more = ViolatedCheckpoints(data, *p1, s1.x, kAddedCheckpoints);
      if (more.empty()) break;
      rows = AddCheckpoints(data, *p1, more);
    }
    if (!rows.ok()) {
      r.failures.push_back(fmt::format("problem 1 ({}): {}", what, rows.message()));
      r.failed++;
      continue;
    }
    if (!s1.has_solution()) {
      r.failures.push_back(fmt::format("problem 1 ({}): {}", what, Describe(s1)));
      continue;
    }
    std::vector<bool> starts(n, false), evicted(n, false);
    for (size_t l = 0; l < n; ++l) {
      starts[l] = l == 0 || s1.x[static_cast<size_t>(p1->start[l])] > 0.5;
      evicted[l] = s1.x[static_cast<size_t>(p1->evicted[l])] > 0.5;
    }
    std::vector<Block> blocks = BlocksOfLayers(m, data.layers, starts, evicted);

    // Problem 2 on those blocks, warm-started from the paper's rule (recompute what costs less than its swap).
    const RecomputeData rdata = MeasureRecompute(m, blocks);
    Result<RecomputeModel> p2 = BuildRecomputeModel(rdata);
    if (!p2.ok()) {
      r.failures.push_back(fmt::format("problem 2 ({}): {}", what, p2.status().message()));
      r.failed++;
      continue;
    }
    if (options.warm_start) {
      std::vector<Block> rule = blocks;
      policy::SelectRecompute(m, rule, {1.0});
      std::vector<bool> on;
      for (size_t i : rdata.evicted) on.push_back(rule[i].mode == BlockMode::kRecompute);
      p2->mip.SetWarmStart(RecomputeValues(rdata, *p2, on));
    }
    const MipSolution s2 = Run(p2->mip, options, deadline, std::max(1, planned - r.solves), r);
    if (!s2.has_solution()) {
      r.failures.push_back(fmt::format("problem 2 ({}): {}", what, Describe(s2)));
      continue;
    }
    std::vector<Block> swapped = blocks;
    for (size_t i = 0; i < rdata.evicted.size(); ++i) {
      const int col = p2->recompute[i];
      if (col >= 0 && s2.x[static_cast<size_t>(col)] > 0.5) blocks[rdata.evicted[i]].mode = BlockMode::kRecompute;
    }
    // The plan of the solution; when its recomputes cannot fit (a rebuild beside a large backward op), the
    // plan of problem 1's blocks with every evicted block swapped.
    Status built = Consider(m, blocks, li, s1, s2, tried, best, best_li);
    if (!built.ok() && swapped != blocks) built = Consider(m, swapped, li, s1, s2, tried, best, best_li);
    if (!built.ok()) r.failures.push_back(fmt::format("plan of the ILP solution ({}): {}", what, built.message()));
  }
  if (skipped > 0) {
    r.failures.push_back(fmt::format("the time limit ({} s) left {} of {} settings untried", options.time_limit_s,
                                     skipped, settings));
  }
  if (!best.plan.strategy.empty() && best.sim.feasible) {
    // Local search around the best plan with the time left; its result is taken only when clearly faster, since
    // plans a few percent apart in simulation replay in either order.
    policy::Candidate polished = best;
    r.neighbours = policy::PolishKarmaPlan(in, layer_options[best_li], polished, [&] {
      return Clock::now() < deadline && !Cancelled(options.cancel);
    });
    r.polished_s = polished.sim.iteration_s;
    const bool taken = polished.sim.iteration_s <= kPolishGain * best.sim.iteration_s;
    r.polished_taken = taken;
    KARMA_LOG(kInfo, "planner II: {} neighbours of the best plan tried, the fastest {:.2f} ms against {:.2f} ms{}",
              r.neighbours, polished.sim.iteration_s * 1e3, best.sim.iteration_s * 1e3, taken ? ": taken" : "");
    if (taken) {
      best = std::move(polished);
      best.plan.note += "; improved by local search";
    }
  }
  const bool have_ilp = !best.plan.strategy.empty() && best.sim.feasible;
  if (have_ilp) r.ilp_s = best.sim.iteration_s;
  for (const std::string& f : r.failures) KARMA_LOG(kInfo, "planner II: {}", f);
  if (have_ilp && (!heuristic.ok() || policy::Better(best.sim, heuristic_sim))) return done(best.plan, "ilp");
  if (!have_ilp) {
    r.fallback = r.failures.empty()      ? std::string("no ILP solution gave a feasible plan")
                 : r.failures.size() == 1 ? r.failures.front()
                                          : fmt::format("{} (and {} more)", r.failures.front(), r.failures.size() - 1);
    KARMA_LOG(kWarn, "planner II: GLPK gave no usable plan ({}); using the heuristic plan", r.fallback);
    if (!heuristic.ok()) {
      return done(Infeasible(fmt::format("{}; the ILP planner: {}", heuristic.status().message(), r.fallback)),
                  "none");
    }
    heuristic->note += "; ILP fallback: " + r.fallback;
  }
  return done(std::move(heuristic), "heuristic");
}

policy::Evaluation Evaluate(std::string_view strategy, const policy::SimInput& in, const policy::SimOptions& sim,
                            const SolverOptions& options, SolveReport* report) {
  if (strategy != "karma") return policy::Evaluate(strategy, in, sim);
  return EvaluateKarmaPlan(in, PlanKarma(in, options, report), sim);
}

policy::Evaluation EvaluateKarmaPlan(const policy::SimInput& in, Result<policy::Plan> plan,
                                     const policy::SimOptions& sim) {
  policy::Evaluation e;
  e.strategy = "karma";
  if (!plan.ok()) {
    e.reason = plan.status().message();
    return e;
  }
  e.plan = std::move(plan).value();
  e.plan.fingerprint = policy::Fingerprint(*in.it, policy::ProfileLabel(in.hw), in.capacity);
  e.sim = policy::Simulate(in, e.plan, sim);
  e.feasible = e.sim.feasible;
  e.reason = e.sim.reason;
  return e;
}

}  // namespace karma::solver
