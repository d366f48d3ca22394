// Ops larger than the capacity: paged over managed memory (simulator, checker, builder, um), schedules by hand.
#include <gtest/gtest.h>

#include <algorithm>

#include "policy/checker.h"
#include "policy/simulator.h"
#include "policy/strategies.h"
#include "policy/um.h"
#include "tests/planner/planner_test_util.h"

namespace karma::policy {
namespace {

using testing::AddTimedOp;
using trace::BufferKind;
using trace::Phase;

// op 0 writes a, op 1 reads a and writes b, op 2 reads a and b and writes c (300 bytes: more than the
// capacity 250), op 3 reads c. Every op takes 10 ns; links move 1 byte/ns; a fault costs 1000 ns per page
// group plus 10 ns per byte.
struct ThreeBuffers {
  trace::Iteration it;
  trace::BufferId a, b, c;
  ThreeBuffers() {
    a = testing::AddBuffer(it, 100, BufferKind::kActivation);
    b = testing::AddBuffer(it, 100, BufferKind::kActivation);
    c = testing::AddBuffer(it, 100, BufferKind::kTemp);
    AddTimedOp(it, Phase::kForward, {}, {a}, 10);
    AddTimedOp(it, Phase::kForward, {a}, {b}, 10);
    AddTimedOp(it, Phase::kBackward, {a, b}, {c}, 10);
    AddTimedOp(it, Phase::kBackward, {c}, {}, 10);
  }
};

Plan Managed(Plan p) {
  p.managed_memory = true;
  return p;
}

TEST(Paging, AnOpLargerThanTheCapacityRunsPagedOverManagedMemoryOnly) {
  ThreeBuffers t;
  const SimInput in = MakeSimInput(t.it, testing::NanosecondProfile(), 250);
  EXPECT_TRUE(in.Paged(2));
  EXPECT_FALSE(in.Paged(1));
  // Device memory: the op cannot start.
  const SimResult device = Simulate(in, testing::PlanOf({}));
  EXPECT_FALSE(device.feasible);
  EXPECT_NE(device.reason.find("allocates device memory explicitly"), std::string::npos) << device.reason;
  // Managed memory: a and b are on the device, c is created; 300 - 250 = 50 bytes are evicted while op 2 runs.
  const Plan plan = Managed(testing::PlanOf({}));
  const SimResult r = Simulate(in, plan, {.record_events = true});
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.iteration_s, 10 + 10 + (10 + 50) + 10);
  EXPECT_NS(r.paging_s, 50);
  EXPECT_NS(r.compute_s, 40);
  EXPECT_NS(r.stall_s, 50);
  EXPECT_EQ(r.paged_ops, 1u);
  EXPECT_EQ(r.paged_in_bytes, 0u);
  EXPECT_EQ(r.paged_out_bytes, 50u);
  EXPECT_EQ(r.peak_bytes, 250u);  // full while it pages, never above
  EXPECT_TRUE(CheckSchedule(in, plan, r).ok()) << CheckSchedule(in, plan, r).message();
}

TEST(Paging, AbsentReadsFaultInAfterTheCopyEnginesDrain) {
  ThreeBuffers t;
  const SimInput in = MakeSimInput(t.it, testing::NanosecondProfile(), 250);
  // a goes to the host after op 1 (100 ns on the link) and nothing brings it back: op 2 waits for the copy
  // (a plain op could not read it at all), then faults a in (one page group: 1000 ns + 100 bytes x 10 ns) and evicts 50 bytes.
  const Plan plan = Managed(testing::PlanOf({testing::SwapOut(t.a, 1)}));
  const SimResult r = Simulate(in, plan, {.record_events = true});
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.iteration_s, 20 + 100 + (10 + 1000 + 1000 + 50) + 10);
  EXPECT_EQ(r.paged_in_bytes, 100u);
  EXPECT_EQ(r.swap_in_bytes, 100u);
  EXPECT_EQ(r.swap_out_bytes, 100u + 50u);
  EXPECT_TRUE(CheckSchedule(in, plan, r).ok()) << CheckSchedule(in, plan, r).message();
}

TEST(Paging, LiveOperandsThatDoNotFitEndInHostMemory) {
  // op 2 (a: 100, b: 40, c: 100, capacity 150) keeps c, the last it touches; a, still read by op 4, does not
  // fit beside it and goes home with the paging (100 bytes written back), to come back by a swap-in.
  trace::Iteration it;
  const auto a = testing::AddBuffer(it, 100, BufferKind::kActivation);
  const auto b = testing::AddBuffer(it, 40, BufferKind::kActivation);
  const auto c = testing::AddBuffer(it, 100, BufferKind::kTemp);
  AddTimedOp(it, Phase::kForward, {}, {a}, 10);
  AddTimedOp(it, Phase::kForward, {a}, {b}, 10);
  AddTimedOp(it, Phase::kBackward, {a, b}, {c}, 10);
  AddTimedOp(it, Phase::kBackward, {c}, {}, 10);
  AddTimedOp(it, Phase::kBackward, {a}, {}, 10);
  const SimInput in = MakeSimInput(it, testing::NanosecondProfile(), 150);
  const Plan plan = Managed(testing::PlanOf({testing::SwapIn(a, 3, 4)}));
  const SimResult r = Simulate(in, plan, {.record_events = true});
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NS(r.iteration_s, 20 + (10 + 100) + 10 + 100 + 10);
  EXPECT_EQ(r.paged_out_bytes, 100u);
  EXPECT_TRUE(CheckSchedule(in, plan, r).ok()) << CheckSchedule(in, plan, r).message();
  // Without the swap-in, op 4 waits for data that never comes.
  EXPECT_FALSE(Simulate(in, Managed(testing::PlanOf({}))).feasible);
  // The capacity strategy plans the way back itself, and the checker agrees.
  const Evaluation e = Evaluate("capacity", in, {.record_events = true});
  ASSERT_TRUE(e.feasible) << e.reason;
  EXPECT_TRUE(e.plan.managed_memory);
  EXPECT_EQ(e.sim.paged_ops, 1u);
  EXPECT_TRUE(CheckSchedule(in, e.plan, e.sim).ok()) << CheckSchedule(in, e.plan, e.sim).message();
}

TEST(Paging, TheCheckerRefusesLazyPaging) {
  // a is swapped out after op 0 and back before op 1; with the swap-in removed from the events, op 1 (200
  // bytes: it fits) would run with a off the device, which only an op larger than the capacity may do.
  ThreeBuffers t;
  const SimInput in = MakeSimInput(t.it, testing::NanosecondProfile(), 1000);
  const Plan plan = Managed(testing::PlanOf({testing::SwapOut(t.a, 0), testing::SwapIn(t.a, 0, 1)}));
  const SimResult good = Simulate(in, plan, {.record_events = true});
  ASSERT_TRUE(good.feasible) << good.reason;
  EXPECT_EQ(good.paged_ops, 0u);
  ASSERT_TRUE(CheckSchedule(in, plan, good).ok());
  SimResult lazy = good;
  std::erase_if(lazy.events, [](const SimEvent& e) {
    return (e.kind == SimEvent::kCopyStart || e.kind == SimEvent::kCopyEnd) && e.index == 1;
  });
  const Status st = CheckSchedule(in, plan, lazy);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("runs paged although its buffers"), std::string::npos) << st.message();
}

TEST(Paging, TheCheckerRederivesThePagingTime) {
  ThreeBuffers t;
  const SimInput in = MakeSimInput(t.it, testing::NanosecondProfile(), 250);
  const Plan plan = Managed(testing::PlanOf({}));
  SimResult r = Simulate(in, plan, {.record_events = true});
  ASSERT_TRUE(r.feasible);
  for (SimEvent& e : r.events) {  // op 2 reported 20 ns shorter, everything after it shifted
    if (e.t >= 20e-9 + 1e-12 && !(e.kind == SimEvent::kComputeStart && e.index == 2)) e.t -= 20e-9;
  }
  r.iteration_s -= 20e-9;
  const Status st = CheckSchedule(in, plan, r);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("op 2 took"), std::string::npos) << st.message();
}

TEST(Paging, UnifiedMemoryStreamsThroughAnOpLargerThanTheCapacity) {
  trace::Iteration it;
  constexpr uint64_t kMiB = 1 << 20;
  const auto a = testing::AddBuffer(it, 4 * kMiB, BufferKind::kActivation);
  const auto b = testing::AddBuffer(it, 4 * kMiB, BufferKind::kActivation);
  const auto c = testing::AddBuffer(it, 4 * kMiB, BufferKind::kTemp);
  AddTimedOp(it, Phase::kForward, {}, {a}, 10);
  AddTimedOp(it, Phase::kForward, {a}, {b}, 10);
  AddTimedOp(it, Phase::kBackward, {a, b}, {c}, 10);
  AddTimedOp(it, Phase::kBackward, {c}, {}, 10);
  const SimInput in = MakeSimInput(it, testing::NanosecondProfile(), 10 * kMiB);
  const SimResult r = SimulateUnifiedMemory(in);
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_EQ(r.paged_ops, 1u);
  EXPECT_GE(r.swap_out_bytes, 2 * kMiB);  // at least the overflow went out
  EXPECT_LE(r.peak_bytes, in.capacity);
}

}  // namespace
}  // namespace karma::policy
