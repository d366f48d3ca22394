// The data-parallel pipeline model (policy/data_parallel.h) on an iteration whose schedule is computed by hand.
#include "policy/data_parallel.h"

#include <gtest/gtest.h>

#include "tests/planner/planner_test_util.h"

namespace karma::testing {
namespace {

using trace::BufferKind;
using trace::Phase;

// Two layers, 100 ns per op: forward 0-200, backward 200-400 (the second layer's gradient is final at 300, the
// first's at 400), then an optimizer op per parameter (10 ns each) that the host takes over. Parameters and
// gradients of 40 bytes (10 fp32 elements).
struct TwoLayers {
  trace::Iteration it;
  trace::BufferId w1, w2, g1, g2, a1;
  TwoLayers() {
    const trace::BufferId x = AddBuffer(it, 100, BufferKind::kInput);
    w1 = AddBuffer(it, 40, BufferKind::kParam);
    w2 = AddBuffer(it, 40, BufferKind::kParam);
    g1 = AddBuffer(it, 40, BufferKind::kGrad);
    g2 = AddBuffer(it, 40, BufferKind::kGrad);
    const trace::BufferId m1 = AddBuffer(it, 40, BufferKind::kState), m2 = AddBuffer(it, 40, BufferKind::kState);
    a1 = AddBuffer(it, 200, BufferKind::kActivation);
    const trace::BufferId a2 = AddBuffer(it, 100, BufferKind::kActivation);
    const trace::BufferId t = AddBuffer(it, 100, BufferKind::kTemp);
    AddTimedOp(it, Phase::kForward, {x, w1}, {a1}, 100);
    AddTimedOp(it, Phase::kForward, {a1, w2}, {a2}, 100);
    AddTimedOp(it, Phase::kBackward, {a2, a1, w2}, {t, g2}, 100);
    AddTimedOp(it, Phase::kBackward, {t, x, w1}, {g1}, 100);
    // Momentum first, then the parameter from it: the parameter derives from the gradient through the state.
    AddTimedOp(it, Phase::kOptimizer, {g1, m1}, {m1}, 5);
    AddTimedOp(it, Phase::kOptimizer, {w1, m1}, {w1}, 5);
    AddTimedOp(it, Phase::kOptimizer, {g2, m2}, {m2}, 5);
    AddTimedOp(it, Phase::kOptimizer, {w2, m2}, {w2}, 5);
  }
};

// Two ranks over a link of 20 ns start-up and 1 B/ns: an allreduce of B bytes costs 20 + B ns; the host updates
// one parameter per ns.
policy::DataParallelOptions Options(policy::DataParallelOptions::Exchange e) {
  policy::DataParallelOptions o;
  o.ranks = 2;
  o.alpha_s = 20e-9;
  o.network_bw = 1e9;
  o.exchange = e;
  o.update_params_per_s = 1e9;
  return o;
}

policy::DataParallelResult Pipeline(const TwoLayers& t, const policy::Plan& plan, policy::DataParallelOptions::Exchange e) {
  const policy::SimInput in = policy::MakeSimInput(t.it, NanosecondProfile(), 1 << 20);
  const policy::SimResult sim = policy::Simulate(in, plan, {.record_events = true});
  EXPECT_TRUE(sim.feasible) << sim.reason;
  return policy::SimulateDataParallel(in, plan, sim, Options(e));
}

TEST(DataParallelTest, PhasedExchangeRunsBesideTheBackwardPass) {
  const TwoLayers t;
  const policy::DataParallelResult r = Pipeline(t, PlanOf({}), policy::DataParallelOptions::Exchange::kPhased);
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.device_s, 400);  // the optimizer ops left the device
  EXPECT_EQ(r.gradient_bytes, 80u);
  // Gradients out as they become final: g2 at 300, g1 at 400.
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_NS(r.out[0].start_s, 300);
  EXPECT_NS(r.out[0].end_s, 340);
  EXPECT_NS(r.out[1].start_s, 400);
  // g1 is out 100 ns after g2's exchange could start: longer than the start-up, so two groups (MG-WFBP).
  ASSERT_EQ(r.exchange.size(), 2u);
  EXPECT_NS(r.exchange[0].start_s, 340);
  EXPECT_NS(r.exchange[0].end_s, 400);
  EXPECT_NS(r.exchange[1].start_s, 440);
  EXPECT_NS(r.exchange[1].end_s, 500);
  // Each group's parameter: updated (10 ns), then back on the device (40 ns).
  EXPECT_NS(r.update[0].start_s, 400);
  EXPECT_NS(r.update[1].end_s, 510);
  EXPECT_NS(r.in[0].end_s, 450);
  EXPECT_NS(r.in[1].end_s, 550);
  // w1 is read first in the next iteration (at its start): the period is 550 ns, set by the last group.
  EXPECT_NS(r.iteration_s, 550);
  EXPECT_EQ(r.critical_group, 1);
  EXPECT_DOUBLE_EQ(r.ExchangeHidden(), 0.5);  // the first group ran before the device finished
}

TEST(DataParallelTest, ExchangeAtTheEndWaitsForTheWholeBackwardPass) {
  const TwoLayers t;
  const policy::DataParallelResult r = Pipeline(t, PlanOf({}), policy::DataParallelOptions::Exchange::kEnd);
  ASSERT_TRUE(r.feasible) << r.reason;
  ASSERT_EQ(r.exchange.size(), 1u);
  EXPECT_NS(r.exchange[0].start_s, 440);
  EXPECT_NS(r.exchange[0].end_s, 540);  // 20 + 80 bytes
  EXPECT_NS(r.update[0].end_s, 560);
  EXPECT_NS(r.in[0].end_s, 640);
  EXPECT_NS(r.iteration_s, 640);
  EXPECT_DOUBLE_EQ(r.ExchangeHidden(), 0.0);
}

TEST(DataParallelTest, MoreRanksCostMoreOnTheRing) {
  policy::DataParallelOptions o = Options(policy::DataParallelOptions::Exchange::kEnd);
  EXPECT_NS(o.Allreduce().Time(100), 120);  // 2 ranks: 20 + 2 (1/2) 100
  o.ranks = 8;
  EXPECT_NS(o.Allreduce().Time(100), 195);  // 20 + 2 (7/8) 100
  o.ranks = 1;
  EXPECT_NS(o.Allreduce().Time(100), 0);
}

TEST(DataParallelTest, GradientsWaitForThePlansCopiesOnTheEngine) {
  const TwoLayers t;
  // A write-back of a1 (200 bytes) after op 1 holds the device-to-host engine from 200 to 400.
  const policy::DataParallelResult r =
      Pipeline(t, PlanOf({SwapOut(t.a1, 1, trace::kNone, /*keep=*/true)}), policy::DataParallelOptions::Exchange::kPhased);
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.out[0].start_s, 400);
  EXPECT_NS(r.out[1].start_s, 440);
}

TEST(DataParallelTest, AnInfeasiblePlanHasNoPipeline) {
  const TwoLayers t;
  const policy::SimInput in = policy::MakeSimInput(t.it, NanosecondProfile(), 1 << 20);
  policy::SimResult sim;
  sim.reason = "too big";
  const policy::DataParallelResult r =
      policy::SimulateDataParallel(in, PlanOf({}), sim, Options(policy::DataParallelOptions::Exchange::kPhased));
  EXPECT_FALSE(r.feasible);
  EXPECT_NE(r.reason.find("too big"), std::string::npos);
}

}  // namespace
}  // namespace karma::testing
