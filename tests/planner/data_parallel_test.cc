// The data-parallel pipeline model (policy/data_parallel.h) on an iteration whose schedule is computed by hand.
#include "policy/data_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "policy/strategies.h"

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

// With the host optimizer the ranks update the parameters on the host: the recorded iteration has no optimizer
// ops, and the runtime homes the exchanged gradients and the updated parameters on the host (AccessModel::
// host_home). Every plan then brings each parameter in before its first forward read and sends each gradient out
// after the backward pass has written it, even where the device has room for everything.
TEST(DataParallelTest, HostHomedBuffersComeInAndGoOutInEveryPlan) {
  trace::Iteration it;
  const trace::BufferId x = AddBuffer(it, 100, BufferKind::kInput);
  const trace::BufferId w1 = AddBuffer(it, 40, BufferKind::kParam), w2 = AddBuffer(it, 40, BufferKind::kParam);
  const trace::BufferId g1 = AddBuffer(it, 40, BufferKind::kGrad), g2 = AddBuffer(it, 40, BufferKind::kGrad);
  const trace::BufferId a1 = AddBuffer(it, 200, BufferKind::kActivation);
  const trace::BufferId a2 = AddBuffer(it, 100, BufferKind::kActivation);
  AddTimedOp(it, Phase::kForward, {x, w1}, {a1}, 100);
  AddTimedOp(it, Phase::kForward, {a1, w2}, {a2}, 100);
  AddTimedOp(it, Phase::kBackward, {a2, a1, w2}, {g2}, 100);
  AddTimedOp(it, Phase::kBackward, {a1, x, w1}, {g1}, 100);
  policy::SimInput in = policy::MakeSimInput(it, NanosecondProfile(), 1 << 20);
  const policy::Evaluation free = policy::Evaluate("karma", in);
  ASSERT_TRUE(free.feasible) << free.reason;
  EXPECT_TRUE(free.plan.host_resident.empty());
  EXPECT_TRUE(free.plan.actions.empty());  // everything fits

  std::vector<bool> host(it.buffers.size(), false);
  for (trace::BufferId b : {w1, w2, g1, g2, a1}) host[b] = true;  // a1 is not persistent: not homed
  policy::HomeOnHost(in.access, host);
  EXPECT_FALSE(in.access.host_home[a1]);
  EXPECT_FALSE(in.access.dead_at_wrap[g1]);  // its first use overwrites it, but the host reads it afterwards
  const policy::Evaluation e = policy::Evaluate("karma", in);
  ASSERT_TRUE(e.feasible) << e.reason;
  std::vector<trace::BufferId> homed = e.plan.host_resident;
  std::sort(homed.begin(), homed.end());
  EXPECT_EQ(homed, (std::vector<trace::BufferId>{w1, w2, g1, g2}));
  auto find = [&](policy::ActionKind kind, trace::BufferId b) {
    return std::find_if(e.plan.actions.begin(), e.plan.actions.end(),
                        [&](const policy::Action& a) { return a.kind == kind && a.buffer == b; });
  };
  // Parameters in before their first forward read, gradients out (written back, not dropped) after their write.
  for (auto [w, first] : {std::pair{w1, 0u}, std::pair{w2, 1u}}) {
    const auto in_w = find(policy::ActionKind::kSwapIn, w);
    ASSERT_NE(in_w, e.plan.actions.end()) << "parameter " << w;
    EXPECT_EQ(in_w->before, first);
  }
  for (auto [g, written] : {std::pair{g2, 2}, std::pair{g1, 3}}) {
    const auto out = find(policy::ActionKind::kSwapOut, g);
    ASSERT_NE(out, e.plan.actions.end()) << "gradient " << g;
    EXPECT_EQ(out->after, written);
    EXPECT_EQ(find(policy::ActionKind::kDiscard, g), e.plan.actions.end());
  }
  EXPECT_EQ(e.sim.swap_out_bytes, 80u);  // the gradients; the parameters' host copies stay current
}

}  // namespace
}  // namespace karma::testing
