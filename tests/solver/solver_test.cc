// Planner II: GLPK's optima against brute force on small models, GLPK's failure paths, the ILP planner's
// fallbacks, and the plan cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "policy/checker.h"
#include "policy/karma.h"
#include "policy/plan_io.h"
#include "solver/mip.h"
#include "solver/plan_cache.h"
#include "solver/planner.h"
#include "solver/problems.h"
#include "tests/common/linear_chain.h"
#include "tests/planner/planner_test_util.h"

namespace karma::solver {
namespace {

using policy::Block;
using policy::BlockMode;

MipOptions Exact() {
  MipOptions o;
  o.mip_gap = 0;
  o.time_limit_s = 30;
  o.progress = nullptr;
  return o;
}

// The smallest objective over every assignment `values(i)` gives for i < count that satisfies the model
// (NaN: none does).
template <typename Values>
double BruteForce(const MipModel& model, uint64_t count, Values values) {
  double best = std::nan("");
  for (uint64_t i = 0; i < count; ++i) {
    const std::vector<double> x = values(i);
    if (x.empty() || !model.Satisfies(x, 1e-9, nullptr)) continue;
    const double obj = model.Objective(x);
    if (std::isnan(best) || obj < best) best = obj;
  }
  return best;
}

// ---- MipModel and GLPK's outcomes ----

TEST(Mip, KnapsackOptimumAndWarmStart) {
  // max 5a + 4b + 3c subject to 2a + 3b + c <= 4 (binary): a and c, 8.
  MipModel m("knapsack");
  const int a = m.AddColumn("a", MipModel::Kind::kBinary, 0, 1, -5);
  const int b = m.AddColumn("b", MipModel::Kind::kBinary, 0, 1, -4);
  const int c = m.AddColumn("c", MipModel::Kind::kBinary, 0, 1, -3);
  ASSERT_TRUE(m.AddRow("weight", {{a, 2}, {b, 3}, {c, 1}}, -kInf, 4).ok());
  m.SetWarmStart({0, 1, 1});
  const MipSolution s = m.Solve(Exact());
  ASSERT_EQ(s.outcome, MipOutcome::kOptimal) << s.message;
  EXPECT_NEAR(s.objective, -8, 1e-9);
  EXPECT_NEAR(s.x[a], 1, 1e-9);
  EXPECT_NEAR(s.x[b], 0, 1e-9);
  EXPECT_NEAR(s.x[c], 1, 1e-9);
  const double brute = BruteForce(m, 8, [](uint64_t i) {
    return std::vector<double>{double(i & 1), double((i >> 1) & 1), double((i >> 2) & 1)};
  });
  EXPECT_NEAR(brute, -8, 1e-9);
}

TEST(Mip, AWarmStartThatBreaksARowIsDroppedWithAReason) {
  MipModel m("bad warm start");
  const int a = m.AddColumn("a", MipModel::Kind::kBinary, 0, 1, -1);
  const int b = m.AddColumn("b", MipModel::Kind::kBinary, 0, 1, -1);
  ASSERT_TRUE(m.AddRow("one", {{a, 1}, {b, 1}}, -kInf, 1).ok());
  m.SetWarmStart({1, 1});
  const MipSolution s = m.Solve(Exact());
  ASSERT_EQ(s.outcome, MipOutcome::kOptimal);
  EXPECT_FALSE(s.warm_start_accepted);
  EXPECT_NE(s.message.find("warm start was dropped"), std::string::npos) << s.message;
  EXPECT_NEAR(s.objective, -1, 1e-9);
}

TEST(Mip, InfeasibleModelSaysSo) {
  MipModel m("infeasible");
  const int a = m.AddColumn("a", MipModel::Kind::kBinary, 0, 1, 1);
  const int b = m.AddColumn("b", MipModel::Kind::kBinary, 0, 1, 1);
  // The LP relaxation is feasible (a = b = 0.5); no integer point is.
  ASSERT_TRUE(m.AddRow("eq", {{a, 2}, {b, 2}}, 1, 1).ok());
  const MipSolution s = m.Solve(Exact());
  EXPECT_EQ(s.outcome, MipOutcome::kInfeasible);
  EXPECT_FALSE(s.has_solution());
  EXPECT_NE(s.message.find("no integer solution"), std::string::npos) << s.message;

  MipModel lp("infeasible LP");
  const int x = lp.AddColumn("x", MipModel::Kind::kContinuous, 0, 1, 1);
  ASSERT_TRUE(lp.AddRow("big", {{x, 1}}, 2, kInf).ok());
  const MipSolution t = lp.Solve(Exact());
  EXPECT_EQ(t.outcome, MipOutcome::kInfeasible);
  EXPECT_NE(t.message.find("LP relaxation"), std::string::npos) << t.message;
}

TEST(Mip, NoTimeGivesNoSolution) {
  MipModel m("no time");
  const int a = m.AddColumn("a", MipModel::Kind::kBinary, 0, 1, 1);
  ASSERT_TRUE(m.AddRow("r", {{a, 1}}, 0, 1).ok());
  MipOptions o = Exact();
  o.time_limit_s = 0;
  const MipSolution s = m.Solve(o);
  EXPECT_EQ(s.outcome, MipOutcome::kNoSolution);
  EXPECT_NE(s.message.find("time limit"), std::string::npos) << s.message;
}

TEST(Mip, SolverErrorsAreReportedNotThrown) {
  // Bounds the wrong way round: GLPK's simplex refuses them (GLP_EBOUND).
  MipModel m("bad bounds");
  const int a = m.AddColumn("a", MipModel::Kind::kContinuous, 2, 1, 1);
  ASSERT_TRUE(m.AddRow("r", {{a, 1}}, 0, kInf).ok());
  const MipSolution s = m.Solve(Exact());
  EXPECT_EQ(s.outcome, MipOutcome::kError);
  EXPECT_NE(s.message.find("GLP_EBOUND"), std::string::npos) << s.message;
  // Rows GLPK would abort the process on are refused when they are added.
  EXPECT_FALSE(m.AddRow("unknown", {{7, 1}}, 0, 1).ok());
  EXPECT_FALSE(m.AddRow("nan", {{a, std::nan("")}}, 0, 1).ok());
}

TEST(Mip, ProgressIsReportedOnceTheSolveRunsLong) {
  // A knapsack with 40 items of similar value per weight, so that branch and bound opens nodes; with the report
  // threshold at 0 s the first callback reports (then one a second).
  MipModel m("progress");
  std::vector<std::pair<int, double>> weight;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> w(20, 40);
  for (int i = 0; i < 40; ++i) {
    const int v = w(rng);
    weight.emplace_back(m.AddColumn("x" + std::to_string(i), MipModel::Kind::kBinary, 0, 1, -(v + 1)), v);
  }
  ASSERT_TRUE(m.AddRow("weight", weight, -kInf, 301).ok());
  MipOptions o = Exact();
  o.progress_after_s = 0;
  std::vector<MipProgress> seen;
  o.progress = [&](const MipProgress& p) { seen.push_back(p); };
  const MipSolution s = m.Solve(o);
  ASSERT_TRUE(s.has_solution()) << s.message;
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().name, "progress");
  EXPECT_GE(seen.front().nodes, 1);
  for (const MipProgress& p : seen) {
    if (p.has_incumbent) {
      EXPECT_GE(p.incumbent, s.objective - 1e-9);  // minimization: never below the optimum
    }
  }
}

// ---- Problem 1 against brute force ----

// Every blocking of n layers with every choice of evicted blocks: index bits 0..n-2 say where blocks start
// (layer l + 1), the next ones which blocks are evicted.
std::vector<double> BlockingByIndex(const BlockingData& d, const BlockingModel& bm, uint64_t i) {
  const size_t n = d.layers.size();
  std::vector<bool> starts(n, false), evicted(n, false);
  starts[0] = true;
  for (size_t l = 1; l < n; ++l) starts[l] = (i >> (l - 1)) & 1;
  uint64_t modes = i >> (n - 1);
  bool cur = false;
  for (size_t l = 0; l < n; ++l) {
    if (starts[l]) {
      cur = modes & 1;
      modes >>= 1;
    }
    evicted[l] = cur;
  }
  if (modes != 0) return {};  // mode bits beyond the blocks there are: counted once, under modes == 0
  return BlockingValues(d, bm, starts, evicted);
}

// Returns whether the model has a solution at all.
bool ExpectBlockingOptimum(const BlockingData& d, uint64_t max_block_bytes) {
  Result<BlockingModel> bm = BuildBlockingModel(d, max_block_bytes);
  EXPECT_TRUE(bm.ok()) << bm.status().message();
  if (!bm.ok()) return false;
  std::vector<size_t> all(d.points.size());
  for (size_t p = 0; p < all.size(); ++p) all[p] = p;
  EXPECT_TRUE(AddCheckpoints(d, *bm, all).ok());
  const size_t n = d.layers.size();
  const double brute =
      BruteForce(bm->mip, uint64_t{1} << (2 * n - 1), [&](uint64_t i) { return BlockingByIndex(d, *bm, i); });
  const MipSolution s = bm->mip.Solve(Exact());
  if (std::isnan(brute)) {
    EXPECT_EQ(s.outcome, MipOutcome::kInfeasible) << s.message;
    return false;
  }
  EXPECT_EQ(s.outcome, MipOutcome::kOptimal) << s.message;
  if (!s.has_solution()) return true;
  EXPECT_NEAR(s.objective, brute, 1e-6 * std::max(1.0, std::abs(brute)));
  // The solution is a blocking too: rebuilt from its decisions, it costs what GLPK says.
  std::vector<bool> starts(n, false), evicted(n, false);
  for (size_t l = 0; l < n; ++l) {
    starts[l] = l == 0 || s.x[static_cast<size_t>(bm->start[l])] > 0.5;
    evicted[l] = s.x[static_cast<size_t>(bm->evicted[l])] > 0.5;
  }
  const std::vector<double> x = BlockingValues(d, *bm, starts, evicted);
  EXPECT_TRUE(bm->mip.Satisfies(x, 1e-7, nullptr));
  EXPECT_NEAR(bm->mip.Objective(x), brute, 1e-6 * std::max(1.0, std::abs(brute)));
  return true;
}

// Random coefficients of the shapes MeasureBlocking gives.
BlockingData RandomBlocking(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  BlockingData d;
  uint32_t op = 0;
  for (size_t l = 0; l < n; ++l) {
    CandidateLayer layer;
    layer.first_op = op;
    op += 2;
    layer.last_op = op - 1;
    layer.forward_s = 1e-3 * (0.2 + u(rng));
    layer.saved_bytes = static_cast<uint64_t>((0.2 + u(rng)) * (1 << 28));
    d.layers.push_back(layer);
    const double bytes = static_cast<double>(layer.saved_bytes);
    d.out_s.push_back(bytes / 12e9);
    d.in_s.push_back(bytes / 12e9);
    d.rebuild_s.push_back(u(rng) < 0.3 ? 1e-4 * u(rng) : 0.0);
    d.need.push_back(1000 - op);  // needed back in reverse order
    d.wait_s.push_back(2e-3 * static_cast<double>(n - l) * u(rng));
  }
  d.round_trip_s_per_byte = 2 / 12e9;
  for (int p = 0; p < 4; ++p) {
    BlockingData::Point pt;
    pt.op = static_cast<uint32_t>(p);
    pt.demand = (0.3 + u(rng)) * (1 << 29);
    pt.residual = u(rng) * (1 << 27);
    for (size_t l = 0; l < n; ++l) {
      if (u(rng) < 0.6) pt.relief.emplace_back(l, static_cast<double>(d.layers[l].saved_bytes));
    }
    d.points.push_back(std::move(pt));
  }
  return d;
}

TEST(Problem1, GlpkFindsTheBruteForceOptimumOnRandomModels) {
  int feasible = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const BlockingData d = RandomBlocking(seed, 7);
    uint64_t total = 0;
    for (const CandidateLayer& l : d.layers) total += l.saved_bytes;
    feasible += ExpectBlockingOptimum(d, total / 3);
  }
  // Both kinds occur: models with an optimum, and models no blocking satisfies (GLPK must say infeasible).
  EXPECT_GE(feasible, 6);
  EXPECT_LT(feasible, 12);
}

// A real graph: a chain of 12 layers at 1/k of its in-core peak, its coefficients measured on the plan builder.
struct SmallGraph {
  trace::Iteration it = testing::LinearChain(61, 3);
  policy::SimInput in;
  policy::PlanningModel m;
  SmallGraph(double k = 2) {
    in = policy::MakeSimInput(it, policy::DefaultProfile(),
                              static_cast<uint64_t>(static_cast<double>(testing::IdealPeak(it)) / k));
    m = policy::BuildPlanningModel(in);
  }
};

TEST(Problem1, GlpkFindsTheBruteForceOptimumOnAMeasuredGraph) {
  for (double k : {1.5, 2.0, 3.0}) {
    SCOPED_TRACE(::testing::Message() << "k " << k);
    SmallGraph g(k);
    const uint64_t target = policy::SavedBytes(g.m) / 4;
    const std::vector<Block> warm = policy::SolveBlocking(g.m, {target, 0, {}});
    std::vector<uint32_t> starts;
    for (const Block& b : warm) starts.push_back(b.first_op);
    const BlockingData d = MeasureBlocking(g.m, CandidateLayers(g.m, 8, starts), warm, {});
    ASSERT_GE(d.layers.size(), 6u);
    ASSERT_LE(d.layers.size(), 10u);
    EXPECT_FALSE(d.points.empty());  // memory pressure: there are checkpoints to satisfy
    EXPECT_TRUE(ExpectBlockingOptimum(d, 2 * target));
  }
}

// ---- Problem 2 against brute force ----

void ExpectRecomputeOptimum(const RecomputeData& d) {
  Result<RecomputeModel> rm = BuildRecomputeModel(d);
  ASSERT_TRUE(rm.ok()) << rm.status().message();
  const size_t k = d.evicted.size();
  const double brute = BruteForce(rm->mip, uint64_t{1} << k, [&](uint64_t i) {
    std::vector<bool> on(k);
    for (size_t j = 0; j < k; ++j) on[j] = (i >> j) & 1;
    for (size_t j = 0; j < k; ++j) {
      if (on[j] && rm->recompute[j] < 0) return std::vector<double>{};
    }
    return RecomputeValues(d, *rm, on);
  });
  ASSERT_FALSE(std::isnan(brute));
  const MipSolution s = rm->mip.Solve(Exact());
  ASSERT_EQ(s.outcome, MipOutcome::kOptimal) << s.message;
  EXPECT_NEAR(s.objective, brute, 1e-6 * std::max(1.0, brute));
}

TEST(Problem2, GlpkFindsTheBruteForceOptimumOnRandomModels) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    RecomputeData d;
    const size_t k = 8;
    for (size_t i = 0; i < k; ++i) {
      d.evicted.push_back(i);
      d.forward_after_s.push_back(1e-3 * static_cast<double>(k - i) * u(rng));
      d.recompute_s.push_back(u(rng) < 0.2 ? -1 : 1e-3 * u(rng));
      d.out_s.push_back(1e-3 * (0.2 + u(rng)));
      d.in_s.push_back(d.out_s.back());
      d.dropped_out_s.push_back(d.out_s.back() * u(rng));
      d.dropped_in_s.push_back(d.dropped_out_s.back());
      d.need.push_back(static_cast<uint32_t>(100 - i));
      d.wait_s.push_back(1e-3 * static_cast<double>(i) * u(rng));
    }
    ExpectRecomputeOptimum(d);
  }
}

TEST(Problem2, GlpkFindsTheBruteForceOptimumOnAMeasuredGraph) {
  SmallGraph g;
  std::vector<Block> blocks = policy::BlocksFromCuts(g.m, policy::BlockCuts(g.m));
  if (blocks.size() > 10) {
    std::vector<uint32_t> starts;
    for (size_t i = 0; i < blocks.size(); i += (blocks.size() + 9) / 10) starts.push_back(blocks[i].first_op);
    blocks = policy::BlocksFromCuts(g.m, starts);
  }
  for (Block& b : blocks) b.mode = BlockMode::kSwap;
  blocks.back().mode = BlockMode::kKeep;
  const RecomputeData d = MeasureRecompute(g.m, blocks);
  ASSERT_GE(d.evicted.size(), 3u);
  ExpectRecomputeOptimum(d);
}

// ---- The ILP planner ----

SolverOptions Quiet(double seconds = 4) {
  SolverOptions o;
  o.time_limit_s = seconds;
  o.progress = nullptr;
  return o;
}

// The plan simulates feasibly and passes the independent checker.
void ExpectValidPlan(const policy::SimInput& in, const policy::Plan& plan) {
  const policy::SimResult sim = policy::Simulate(in, plan, {.record_events = true});
  ASSERT_TRUE(sim.feasible) << sim.reason;
  const Status st = policy::CheckSchedule(in, plan, sim);
  EXPECT_TRUE(st.ok()) << st.message();
}

TEST(Planner, IlpPlanOnAChainIsValidAndNeverSlowerThanTheHeuristic) {
  SmallGraph g;
  SolveReport r;
  Result<policy::Plan> plan = PlanKarma(g.in, Quiet(), &r);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ExpectValidPlan(g.in, *plan);
  EXPECT_GT(r.solves, 0);
  EXPECT_GE(r.heuristic_s, 0);
  EXPECT_TRUE(r.fallback.empty()) << r.fallback;
  const double t = policy::Simulate(g.in, *plan).iteration_s;
  EXPECT_LE(t, r.heuristic_s * (1 + 1e-12));
  if (r.winner == "ilp") {
    EXPECT_NE(plan->note.find("ILP"), std::string::npos);
    EXPECT_NEAR(t, r.ilp_s, 1e-12);
  }
}

// The iteration libkarma.so plans for skipnet_trainer at 256 MiB on a 64 MiB device (tests/data/traces): at
// many forward ops the memory checkpoints need skip values off the device before their last forward use, and
// backward values between two of their uses, which only capacity-based eviction frees. Counted as other data,
// problem 1 has solutions, and they beat the heuristic's capacity-based plan by far.
TEST(Planner, SkipValuesInTheForwardPassAreOtherDataProblem1MayEvict) {
  const trace::Iteration it =
      testing::LoadOrDie(testing::WorkloadPath("traces/skipnet-256mib-planning.json"));
  const policy::SimInput in = policy::MakeSimInput(it, policy::DefaultProfile(), 57.6 * (1 << 20));
  SolveReport r;
  Result<policy::Plan> plan = PlanKarma(in, Quiet(30), &r);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ExpectValidPlan(in, *plan);
  EXPECT_EQ(r.winner, "ilp") << r.fallback;
  EXPECT_LT(r.ilp_s, 0.85 * r.heuristic_s) << "ILP " << r.ilp_s << " s, heuristic " << r.heuristic_s << " s";
  // The local search ran around the best ILP plan; its best replaced it only if clearly faster.
  EXPECT_GT(r.neighbours, 0);
  if (r.polished_taken) EXPECT_DOUBLE_EQ(r.ilp_s, r.polished_s);
  else EXPECT_GE(r.polished_s, 0.95 * r.ilp_s);
  EXPECT_NE(r.Summary().find(" neighbours tried, fastest "), std::string::npos) << r.Summary();
  EXPECT_EQ(r.Summary().find(": taken") != std::string::npos, r.polished_taken) << r.Summary();
}

TEST(Planner, NoTimeForGlpkFallsBackToTheHeuristicPlan) {
  SmallGraph g;
  SolveReport r;
  Result<policy::Plan> plan = PlanKarma(g.in, Quiet(0), &r);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(r.winner, "heuristic");
  EXPECT_NE(r.fallback.find("time limit"), std::string::npos) << r.fallback;
  EXPECT_NE(plan->note.find("ILP fallback"), std::string::npos) << plan->note;
  ExpectValidPlan(g.in, *plan);
  const Result<policy::Plan> heuristic = policy::PlanKarma(g.in);
  ASSERT_TRUE(heuristic.ok());
  EXPECT_EQ(plan->actions.size(), heuristic->actions.size());
}

TEST(Planner, ACancelledPlanStopsAndKeepsTheHeuristicPlan) {
  SmallGraph g;
  const std::atomic<bool> cancel{true};
  SolverOptions o = Quiet();
  o.cancel = &cancel;
  SolveReport r;
  Result<policy::Plan> plan = PlanKarma(g.in, o, &r);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ExpectValidPlan(g.in, *plan);
  EXPECT_EQ(r.solves, 0);
  EXPECT_EQ(r.winner, "heuristic");
  EXPECT_NE(r.fallback.find("untried"), std::string::npos) << r.fallback;
}

TEST(Planner, GlpkErrorsFallBackToTheHeuristicPlan) {
  SmallGraph g;
  SolverOptions o = Quiet();
  o.lp_iteration_limit = 1;  // every root LP relaxation stops after one simplex iteration: GLP_EITLIM
  SolveReport r;
  Result<policy::Plan> plan = PlanKarma(g.in, o, &r);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_GT(r.failed, 0);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_NE(r.failures.front().find("GLP_EITLIM"), std::string::npos) << r.failures.front();
  EXPECT_EQ(r.winner, "heuristic");
  EXPECT_FALSE(r.fallback.empty());
  ExpectValidPlan(g.in, *plan);
}

TEST(Planner, CapacityBelowTheFloorIsAClearError) {
  trace::Iteration it = testing::LinearChain(61, 3);
  // Below the persistent data and every op's own operands: no plan of either solver exists.
  const policy::SimInput in = policy::MakeSimInput(it, policy::DefaultProfile(), 1 << 16);
  SolveReport r;
  Result<policy::Plan> plan = PlanKarma(in, Quiet(), &r);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("the ILP planner"), std::string::npos) << plan.status().message();
  EXPECT_EQ(r.winner, "none");
}

TEST(Planner, HeuristicKindIsPlannerI) {
  SmallGraph g;
  SolverOptions o = Quiet();
  o.kind = SolverKind::kHeuristic;
  SolveReport r;
  Result<policy::Plan> plan = PlanKarma(g.in, o, &r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(r.solves, 0);
  const Result<policy::Plan> heuristic = policy::PlanKarma(g.in);
  ASSERT_TRUE(heuristic.ok());
  EXPECT_EQ(plan->note, heuristic->note);
  EXPECT_EQ(plan->actions.size(), heuristic->actions.size());
}

// ---- The plan cache ----

TEST(PlanCache, SecondRunLoadsTheStoredPlan) {
  SmallGraph g;
  const std::string dir = ::testing::TempDir() + "/karma-plan-cache-test";
  std::filesystem::remove_all(dir);
  SolverOptions o = Quiet();
  CacheOutcome c1, c2;
  SolveReport r1, r2;
  Result<policy::Plan> p1 = PlanKarmaCached(g.in, o, dir, &c1, &r1);
  ASSERT_TRUE(p1.ok()) << p1.status().message();
  EXPECT_TRUE(c1.enabled);
  EXPECT_FALSE(c1.hit);
  EXPECT_TRUE(c1.stored) << c1.note;
  EXPECT_TRUE(std::filesystem::exists(c1.path));
  EXPECT_GT(r1.solves, 0);
  Result<policy::Plan> p2 = PlanKarmaCached(g.in, o, dir, &c2, &r2);
  ASSERT_TRUE(p2.ok()) << p2.status().message();
  EXPECT_TRUE(c2.hit);
  EXPECT_EQ(c2.path, c1.path);
  EXPECT_EQ(r2.solves, 0);  // nothing solved
  EXPECT_EQ(policy::PlanToJson(*p2), policy::PlanToJson(*p1));
  ExpectValidPlan(g.in, *p2);

  // Other inputs or settings: another key, planned afresh.
  SolverOptions h = o;
  h.kind = SolverKind::kHeuristic;
  EXPECT_NE(PlanCacheKey(g.in, h), PlanCacheKey(g.in, o));
  SmallGraph tighter(3);
  EXPECT_NE(PlanCacheKey(tighter.in, o), PlanCacheKey(g.in, o));

  // A damaged file is ignored with a note, replanned and rewritten.
  std::ofstream(c1.path) << "{ not a plan";
  CacheOutcome c3;
  Result<policy::Plan> p3 = PlanKarmaCached(g.in, o, dir, &c3, nullptr);
  ASSERT_TRUE(p3.ok());
  EXPECT_FALSE(c3.hit);
  EXPECT_TRUE(c3.stored);
  EXPECT_NE(c3.note.find("ignored"), std::string::npos) << c3.note;

  // A plan made for other inputs under this key (a copied file) is refused by its fingerprint.
  std::filesystem::copy_file(c1.path, dir + "/other.json");
  policy::Plan other = *p1;
  other.fingerprint = "0000";
  ASSERT_TRUE(policy::WritePlanFile(c1.path, other).ok());
  CacheOutcome c4;
  ASSERT_TRUE(PlanKarmaCached(g.in, o, dir, &c4, nullptr).ok());
  EXPECT_FALSE(c4.hit);
  EXPECT_NE(c4.note.find("fingerprint"), std::string::npos) << c4.note;

  // No directory: no cache.
  CacheOutcome c5;
  ASSERT_TRUE(PlanKarmaCached(g.in, h, "", &c5, nullptr).ok());
  EXPECT_FALSE(c5.enabled);
  EXPECT_FALSE(c5.stored);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace karma::solver
