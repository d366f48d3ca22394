// The simulator against schedules computed by hand: overlap, stalls, capacity, recompute, skip connections,
// FIFO copy engines, synchronous offload, persistent data at home on the host, and refused plans.
#include <gtest/gtest.h>

#include "policy/checker.h"
#include "policy/plan_builder.h"
#include "policy/simulator.h"
#include "tests/planner/planner_test_util.h"

namespace karma::policy {
namespace {

using testing::AddTimedOp;
using testing::NanosecondProfile;
using trace::BufferKind;
using trace::Phase;

SimResult SimulateChecked(const SimInput& in, const Plan& plan) {
  SimResult r = Simulate(in, plan, {.record_events = true, .record_memory = true});
  if (r.feasible) {
    Status st = CheckSchedule(in, plan, r);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  return r;
}

// f0 writes x (100 ns); f1 writes y (500 ns); b0 reads y, writes g (100 ns); b1 reads x and g (100 ns).
struct OverlapCase {
  trace::Iteration it;
  trace::BufferId x, y, g;
  OverlapCase() {
    x = testing::AddBuffer(it, 300, BufferKind::kActivation);
    y = testing::AddBuffer(it, 200, BufferKind::kActivation);
    g = testing::AddBuffer(it, 100, BufferKind::kTemp);
    AddTimedOp(it, Phase::kForward, {}, {x}, 100);
    AddTimedOp(it, Phase::kForward, {}, {y}, 500);
    AddTimedOp(it, Phase::kBackward, {y}, {g}, 100);
    AddTimedOp(it, Phase::kBackward, {x, g}, {}, 100);
  }
};

TEST(Simulator, InCoreIsTheSumOfOpsAndPeaksAtTheIdealCurve) {
  OverlapCase c;
  const SimInput in = MakeSimInput(c.it, NanosecondProfile(), 600);
  const SimResult r = SimulateChecked(in, testing::PlanOf({}));
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.iteration_s, 800);
  EXPECT_NS(r.stall_s, 0);
  EXPECT_EQ(r.peak_bytes, 600u);  // x + y + g while b0 runs
  EXPECT_EQ(r.peak_bytes, testing::IdealPeak(c.it));
  EXPECT_DOUBLE_EQ(r.Occupancy(), 1.0);
  const SimResult tight = SimulateChecked(MakeSimInput(c.it, NanosecondProfile(), 599), testing::PlanOf({}));
  EXPECT_FALSE(tight.feasible);
  EXPECT_NE(tight.reason.find("capacity exceeded at op 2"), std::string::npos) << tight.reason;
}

TEST(Simulator, SwapOutOverlapsComputeAndALateSwapInStalls) {
  OverlapCase c;
  const SimInput in = MakeSimInput(c.it, NanosecondProfile(), 600);
  // x leaves after f0 while f1 computes (D2H 100..400); it comes back once f1 is done (H2D 600..900), so b1,
  // ready at 700, waits 200 ns.
  const SimResult r = SimulateChecked(in, testing::PlanOf({testing::SwapOut(c.x, 0), testing::SwapIn(c.x, 1, 3)}));
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.iteration_s, 1000);
  EXPECT_NS(r.compute_s, 800);
  EXPECT_NS(r.stall_s, 200);
  EXPECT_NS(r.h2d_busy_s, 300);
  EXPECT_NS(r.d2h_busy_s, 300);
  EXPECT_EQ(r.swap_in_bytes, 300u);
  EXPECT_EQ(r.swap_out_bytes, 300u);
  EXPECT_EQ(r.peak_bytes, 600u);  // y + x arriving + g at 600 ns
  EXPECT_DOUBLE_EQ(r.Occupancy(), 0.8);
  // Eq. 1 over time: busy until 700 ns, idle while b1 waits for x, busy again from 900 ns.
  const std::vector<double> slices = OccupancyOverTime(r, 10);
  const std::vector<double> expect_slices = {1, 1, 1, 1, 1, 1, 1, 0, 0, 1};
  ASSERT_EQ(slices.size(), expect_slices.size());
  for (size_t i = 0; i < slices.size(); ++i) EXPECT_NEAR(slices[i], expect_slices[i], 1e-9) << i;
  // The memory curve: x alone, x + y, y after the copy-out frees x, then x arrives with g.
  const std::vector<std::pair<double, uint64_t>> expect = {
      {0, 300}, {100e-9, 500}, {400e-9, 200}, {600e-9, 600}, {700e-9, 400}, {1000e-9, 0}};
  ASSERT_EQ(r.memory.size(), expect.size());
  for (size_t i = 0; i < expect.size(); ++i) {
    EXPECT_NEAR(r.memory[i].first, expect[i].first, 1e-15) << i;
    EXPECT_EQ(r.memory[i].second, expect[i].second) << i;
  }
}

TEST(Simulator, CapacityDecidesWhetherAPrefetchFits) {
  OverlapCase c;
  const SimInput in = MakeSimInput(c.it, NanosecondProfile(), 550);
  // With 550 B the swap-in issued after f1 takes the room b0 needs for g: nothing can free it.
  const SimResult early = SimulateChecked(in, testing::PlanOf({testing::SwapOut(c.x, 0), testing::SwapIn(c.x, 1, 3)}));
  EXPECT_FALSE(early.feasible);
  EXPECT_NE(early.reason.find("capacity exceeded at op 2"), std::string::npos) << early.reason;
  // Issued after b0 instead (y freed): H2D 700..1000, b1 1000..1100.
  const SimResult late = SimulateChecked(in, testing::PlanOf({testing::SwapOut(c.x, 0), testing::SwapIn(c.x, 2, 3)}));
  ASSERT_TRUE(late.feasible) << late.reason;
  EXPECT_NS(late.iteration_s, 1100);
  EXPECT_NS(late.stall_s, 300);
  EXPECT_EQ(late.peak_bytes, 500u);
}

TEST(Simulator, RecomputeRebuildsADroppedValueOnTheComputeEngine) {
  trace::Iteration it;
  const auto x = testing::AddBuffer(it, 100, BufferKind::kActivation);
  const auto z = testing::AddBuffer(it, 400, BufferKind::kActivation);
  const auto w = testing::AddBuffer(it, 50, BufferKind::kActivation);
  const auto g = testing::AddBuffer(it, 10, BufferKind::kTemp);
  AddTimedOp(it, Phase::kForward, {}, {x}, 100);      // 0
  AddTimedOp(it, Phase::kForward, {x}, {z}, 40);      // 1: cheap
  AddTimedOp(it, Phase::kForward, {z}, {w}, 100);     // 2
  AddTimedOp(it, Phase::kBackward, {w}, {g}, 100);    // 3
  AddTimedOp(it, Phase::kBackward, {z, g}, {}, 100);  // 4
  AddTimedOp(it, Phase::kBackward, {x, g}, {}, 100);  // 5
  EXPECT_EQ(testing::IdealPeak(it), 560u);
  const SimInput in = MakeSimInput(it, NanosecondProfile(), 555);
  EXPECT_FALSE(SimulateChecked(in, testing::PlanOf({})).feasible);
  const SimResult r = SimulateChecked(in, testing::PlanOf({testing::Discard(z, 2), testing::Recompute({1}, 4)}));
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.iteration_s, 580);
  EXPECT_NS(r.compute_s, 540);
  EXPECT_NS(r.recompute_s, 40);
  EXPECT_NS(r.stall_s, 0);
  EXPECT_EQ(r.swap_in_bytes + r.swap_out_bytes, 0u);
  EXPECT_EQ(r.peak_bytes, 550u);  // x + z + w at f2; x + z + g after the recompute is 510
  ASSERT_EQ(r.sequence.size(), 7u);
  EXPECT_EQ(r.sequence[4].op, 1u);
  EXPECT_EQ(r.sequence[4].action, 1u);
  // Without the recompute, b1 reads a value that is gone.
  const SimResult missing = SimulateChecked(in, testing::PlanOf({testing::Discard(z, 2)}));
  EXPECT_FALSE(missing.feasible);
  EXPECT_NE(missing.reason.find("op 4"), std::string::npos) << missing.reason;
  EXPECT_NE(missing.reason.find("buffer 1"), std::string::npos) << missing.reason;
}

TEST(Simulator, ASkipConnectionNeedsItsValueBackForEveryConsumer) {
  trace::Iteration it;
  const auto x = testing::AddBuffer(it, 300, BufferKind::kActivation);
  const auto a = testing::AddBuffer(it, 100, BufferKind::kActivation);
  const auto b = testing::AddBuffer(it, 100, BufferKind::kActivation);
  const auto c = testing::AddBuffer(it, 100, BufferKind::kActivation);
  const auto g = testing::AddBuffer(it, 10, BufferKind::kTemp);
  AddTimedOp(it, Phase::kForward, {}, {x}, 100);      // 0
  AddTimedOp(it, Phase::kForward, {x}, {a}, 100);     // 1
  AddTimedOp(it, Phase::kForward, {a}, {b}, 100);     // 2
  AddTimedOp(it, Phase::kForward, {b, x}, {c}, 100);  // 3: the skip connection reads x again
  AddTimedOp(it, Phase::kBackward, {c}, {g}, 100);    // 4
  AddTimedOp(it, Phase::kBackward, {x, g}, {}, 100);  // 5
  const SimInput in = MakeSimInput(it, NanosecondProfile(), 1000);
  const SimResult only_backward = SimulateChecked(in, testing::PlanOf({testing::SwapOut(x, 1), testing::SwapIn(x, 3, 5)}));
  EXPECT_FALSE(only_backward.feasible);
  EXPECT_NE(only_backward.reason.find("op 3"), std::string::npos) << only_backward.reason;
  // Back for op 3 (the H2D waits for the copy-out: 200..500 out, 500..800 in, op 3 at 800), then dropped
  // without a second write-back — the host copy is still current — and back again for op 5.
  const SimResult r = SimulateChecked(in, testing::PlanOf({testing::SwapOut(x, 1), testing::SwapIn(x, 2, 3), testing::Discard(x, 3),
                                               testing::SwapIn(x, 4, 5)}));
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.iteration_s, 1400);
  EXPECT_NS(r.stall_s, 800);
  EXPECT_EQ(r.swap_out_bytes, 300u);
  EXPECT_EQ(r.swap_in_bytes, 600u);
}

TEST(Simulator, CopyEnginesServeSwapInsFirstInFirstOut) {
  trace::Iteration it;
  const auto p = testing::AddBuffer(it, 300, BufferKind::kActivation);
  const auto q = testing::AddBuffer(it, 100, BufferKind::kActivation);
  const auto t = testing::AddBuffer(it, 300, BufferKind::kTemp);
  AddTimedOp(it, Phase::kForward, {}, {p}, 10);    // 0
  AddTimedOp(it, Phase::kForward, {}, {q}, 10);    // 1
  AddTimedOp(it, Phase::kForward, {}, {t}, 100);   // 2: waits for p's copy-out to make room (310..410)
  AddTimedOp(it, Phase::kBackward, {t}, {}, 10);   // 3: t dies at 420
  AddTimedOp(it, Phase::kBackward, {q}, {}, 10);   // 4
  AddTimedOp(it, Phase::kBackward, {p}, {}, 10);   // 5
  const SimInput in = MakeSimInput(it, NanosecondProfile(), 500);
  // p out 10..310, q out 310..410. With p first in the host-to-device queue, p does not fit until t dies (420)
  // and q, which would fit at 410, waits behind it: p 420..720, q 720..820, op 4 820..830, op 5 830..840.
  const SimResult head_blocked = SimulateChecked(in, testing::PlanOf({testing::SwapOut(p, 0), testing::SwapOut(q, 1),
                                                          testing::SwapIn(p, 2, 5), testing::SwapIn(q, 2, 4)}));
  ASSERT_TRUE(head_blocked.feasible) << head_blocked.reason;
  EXPECT_NS(head_blocked.iteration_s, 840);
  // In the order they are needed: q 410..510, p 510..810, op 4 510..520, op 5 810..820.
  const SimResult need_order = SimulateChecked(in, testing::PlanOf({testing::SwapOut(p, 0), testing::SwapOut(q, 1),
                                                        testing::SwapIn(q, 2, 4), testing::SwapIn(p, 2, 5)}));
  ASSERT_TRUE(need_order.feasible) << need_order.reason;
  EXPECT_NS(need_order.iteration_s, 820);
  EXPECT_NS(need_order.stall_s, 820 - 150);
}

// A buffer whose pages hold more than its value (Buffer::moved_bytes, the copy path's planning iteration) takes
// its pages' room and moves its value's bytes.
TEST(Simulator, AMoveCopiesTheValueAndTheBufferTakesItsPages) {
  trace::Iteration it;
  const auto p = testing::AddBuffer(it, 300, BufferKind::kActivation);
  it.buffers[p].moved_bytes = 200;
  const auto t = testing::AddBuffer(it, 250, BufferKind::kTemp);
  AddTimedOp(it, Phase::kForward, {}, {p}, 10);   // 0
  AddTimedOp(it, Phase::kForward, {}, {t}, 10);   // 1: waits for p's copy-out (10..210) to make room
  AddTimedOp(it, Phase::kBackward, {t}, {}, 10);  // 2: 220..230, t dies
  AddTimedOp(it, Phase::kBackward, {p}, {}, 10);  // 3: p back 230..430 (its 300 bytes: 640 in all)
  const SimInput in = MakeSimInput(it, NanosecondProfile(), 500);
  const SimResult r = SimulateChecked(in, testing::PlanOf({testing::SwapOut(p, 0), testing::SwapIn(p, 2, 3)}));
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.iteration_s, 440);
  EXPECT_EQ(r.peak_bytes, 300u);
}

TEST(Simulator, ASynchronousOffloadHoldsTheNextOp) {
  trace::Iteration it;
  const auto x = testing::AddBuffer(it, 300, BufferKind::kActivation);
  const auto y = testing::AddBuffer(it, 10, BufferKind::kActivation);
  AddTimedOp(it, Phase::kForward, {}, {x}, 100);    // 0
  AddTimedOp(it, Phase::kForward, {x}, {y}, 100);   // 1: reads x while it is written back
  AddTimedOp(it, Phase::kForward, {y}, {}, 100);    // 2: vDNN-style, waits for the write-back
  AddTimedOp(it, Phase::kBackward, {x}, {}, 100);   // 3
  const SimInput in = MakeSimInput(it, NanosecondProfile(), 1000);
  // Copy-out starts at 100 (keeping the device copy), op 1 runs alongside, op 2 waits until 400, x is dropped
  // after op 1 (freed when the copy is done) and prefetched after op 2 (500..800), op 3 at 800.
  const SimResult r = SimulateChecked(in, testing::PlanOf({testing::SwapOut(x, 0, 2, true), testing::Discard(x, 1),
                                               testing::SwapIn(x, 2, 3)}));
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.iteration_s, 900);
  EXPECT_NS(r.stall_s, 500);
}

TEST(Simulator, HostResidentPersistentDataComesInAndGoesBack) {
  trace::Iteration it;
  const auto w = testing::AddBuffer(it, 200, BufferKind::kParam);
  const auto gw = testing::AddBuffer(it, 250, BufferKind::kGrad);
  const auto a = testing::AddBuffer(it, 100, BufferKind::kActivation);
  AddTimedOp(it, Phase::kForward, {w}, {a}, 300);         // 0
  AddTimedOp(it, Phase::kBackward, {a}, {gw}, 300);       // 1: the gradient is produced, not accumulated
  AddTimedOp(it, Phase::kOptimizer, {w, gw}, {w}, 100);   // 2
  const SimInput in = MakeSimInput(it, NanosecondProfile(), 500);
  EXPECT_FALSE(SimulateChecked(in, testing::PlanOf({})).feasible);  // w + gw + a = 550 on the device
  // w in 0..200, op 0 200..500, w dropped (the host copy is current), op 1 500..800, w in again 800..1000,
  // op 2 1000..1100, the updated w written back 1100..1300; gw's value dies after op 2.
  Plan p = testing::PlanOf({testing::SwapIn(w, kAtStart, 0), testing::Discard(w, 0), testing::SwapIn(w, 1, 2),
                            testing::SwapOut(w, 2), testing::Discard(gw, 2)});
  p.host_resident = {w, gw};
  const SimResult r = SimulateChecked(in, p);
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.iteration_s, 1300);
  EXPECT_EQ(r.peak_bytes, 450u);
  EXPECT_EQ(r.swap_in_bytes, 400u);
  EXPECT_EQ(r.swap_out_bytes, 200u);
  // The updated weights must reach the host.
  Plan lost = p;
  lost.actions[3] = testing::Discard(w, 2);
  const SimResult bad = SimulateChecked(in, lost);
  EXPECT_FALSE(bad.feasible);
  EXPECT_NE(bad.reason.find("not written back"), std::string::npos) << bad.reason;
}

TEST(Simulator, RefusesPlansThatBreakData) {
  OverlapCase c;
  const SimInput in = MakeSimInput(c.it, NanosecondProfile(), 1000);
  struct Case {
    const char* what;
    Plan plan;
    const char* reason;
  };
  const Case cases[] = {
      {"use after the swap-out was issued", testing::PlanOf({testing::SwapOut(c.y, 1), testing::SwapIn(c.y, 1, 3)}),
       "after a swap-out that frees it"},
      {"swap-in of data never written back", testing::PlanOf({testing::Discard(c.x, 0), testing::SwapIn(c.x, 1, 3)}),
       "no valid copy"},
      {"swap-in of resident data", testing::PlanOf({testing::SwapIn(c.x, 1, 3)}), "already on the device"},
      {"recompute of a backward op", testing::PlanOf({testing::Recompute({2}, 3)}), "not a forward op"},
      {"buffer out of range", testing::PlanOf({testing::Discard(99, 0)}), "out of range"},
      {"swap-in waited for before it is issued", testing::PlanOf({testing::SwapOut(c.x, 0), testing::SwapIn(c.x, 3, 3)}),
       "issued only after"},
  };
  for (const Case& k : cases) {
    const SimResult r = SimulateChecked(in, k.plan);
    EXPECT_FALSE(r.feasible) << k.what;
    EXPECT_NE(r.reason.find(k.reason), std::string::npos) << k.what << ": " << r.reason;
  }
}

TEST(Simulator, StaticMemoryMatchesTheSimulatorWhenCopiesAreInstant) {
  OverlapCase c;
  const SimInput in = MakeSimInput(c.it, NanosecondProfile(), 1000);
  const Plan p = testing::PlanOf({testing::SwapOut(c.x, 0), testing::SwapIn(c.x, 2, 3)});
  const std::vector<uint64_t> mem = StaticMemory(in, p);
  EXPECT_EQ(mem, (std::vector<uint64_t>{300, 200, 300, 400}));
}

}  // namespace
}  // namespace karma::policy
