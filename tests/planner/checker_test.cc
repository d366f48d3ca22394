// The independent schedule checker: it accepts what is right and catches what the simulator cannot see
// (a recompute from a changed input) or what a broken simulator would report (bad times, missing copies).
#include <gtest/gtest.h>

#include <algorithm>

#include "policy/checker.h"
#include "policy/planning_model.h"
#include "policy/simulator.h"
#include "tests/planner/planner_test_util.h"

namespace karma::policy {
namespace {

using testing::AddTimedOp;
using trace::BufferKind;
using trace::Phase;

// x (skip connection) is swapped out, back for op 3, dropped, and back for op 5.
struct SkipCase {
  trace::Iteration it;
  trace::BufferId x;
  Plan plan;
  SkipCase() {
    x = testing::AddBuffer(it, 300, BufferKind::kActivation);
    const auto a = testing::AddBuffer(it, 100, BufferKind::kActivation);
    const auto b = testing::AddBuffer(it, 100, BufferKind::kActivation);
    const auto c = testing::AddBuffer(it, 100, BufferKind::kActivation);
    const auto g = testing::AddBuffer(it, 10, BufferKind::kTemp);
    AddTimedOp(it, Phase::kForward, {}, {x}, 100);
    AddTimedOp(it, Phase::kForward, {x}, {a}, 100);
    AddTimedOp(it, Phase::kForward, {a}, {b}, 100);
    AddTimedOp(it, Phase::kForward, {b, x}, {c}, 100);
    AddTimedOp(it, Phase::kBackward, {c}, {g}, 100);
    AddTimedOp(it, Phase::kBackward, {x, g}, {}, 100);
    plan = testing::PlanOf({testing::SwapOut(x, 1), testing::SwapIn(x, 2, 3), testing::Discard(x, 3),
                            testing::SwapIn(x, 4, 5)});
  }
};

TEST(Checker, AcceptsACorrectSchedule) {
  SkipCase c;
  const SimInput in = MakeSimInput(c.it, testing::NanosecondProfile(), 1000);
  const SimResult r = Simulate(in, c.plan, {.record_events = true});
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_TRUE(CheckSchedule(in, c.plan, r).ok()) << CheckSchedule(in, c.plan, r).message();
}

TEST(Checker, CatchesTamperedSchedules) {
  SkipCase c;
  const SimInput in = MakeSimInput(c.it, testing::NanosecondProfile(), 1000);
  const SimResult good = Simulate(in, c.plan, {.record_events = true});
  ASSERT_TRUE(good.feasible);
  auto expect_caught = [&](const SimResult& r, const char* what, const char* message) {
    const Status st = CheckSchedule(in, c.plan, r);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_NE(st.message().find(message), std::string::npos) << what << ": " << st.message();
  };
  {
    SimResult r = good;  // the second swap-in never happened
    std::erase_if(r.events, [](const SimEvent& e) { return e.kind != SimEvent::kComputeStart &&
                                                           e.kind != SimEvent::kComputeEnd && e.index == 3; });
    expect_caught(r, "missing swap-in", "not on the device");
  }
  {
    SimResult r = good;  // a copy that ends too early
    for (SimEvent& e : r.events) {
      if (e.kind == SimEvent::kCopyEnd && e.index == 1) e.t -= 50e-9;
    }
    std::stable_sort(r.events.begin(), r.events.end(), [](const SimEvent& a, const SimEvent& b) { return a.t < b.t; });
    expect_caught(r, "short copy", "wrong time");
  }
  {
    SimResult r = good;  // the simulator under-reports the peak
    r.peak_bytes -= 1;
    expect_caught(r, "peak", "reported");
  }
  {
    const SimInput small = MakeSimInput(c.it, testing::NanosecondProfile(), 450);
    const Status st = CheckSchedule(small, c.plan, good);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("over the capacity"), std::string::npos) << st.message();
  }
}

TEST(Checker, CatchesARecomputeFromAChangedInput) {
  // z = f(x); then x changes in place; a recompute of f before the backward pass would read the new x. The
  // simulator sees resident data and accepts the plan; the checker tracks values and does not.
  trace::Iteration it;
  const auto x = testing::AddBuffer(it, 100, BufferKind::kActivation);
  const auto z = testing::AddBuffer(it, 100, BufferKind::kActivation);
  AddTimedOp(it, Phase::kForward, {}, {x}, 10);      // 0
  AddTimedOp(it, Phase::kForward, {x}, {z}, 10);     // 1
  AddTimedOp(it, Phase::kForward, {x}, {x}, 10);     // 2: in place
  AddTimedOp(it, Phase::kBackward, {z}, {}, 10);     // 3
  AddTimedOp(it, Phase::kBackward, {x}, {}, 10);     // 4
  const SimInput in = MakeSimInput(it, testing::NanosecondProfile(), 1000);
  const Plan plan = testing::PlanOf({testing::Discard(z, 1), testing::Recompute({1}, 3)});
  const SimResult r = Simulate(in, plan, {.record_events = true});
  ASSERT_TRUE(r.feasible) << r.reason;
  const Status st = CheckSchedule(in, plan, r);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("value written by op 2 instead of op 0"), std::string::npos) << st.message();
}

// z = f(x), and the application frees x soon after f: a recompute of f in the backward pass would read memory
// that is no longer the application's (the runtime cannot run it). Nothing else distinguishes the plan.
struct FreedInput {
  trace::Iteration it;
  trace::BufferId x, z;
  FreedInput() {
    x = testing::AddBuffer(it, 100, BufferKind::kActivation);
    z = testing::AddBuffer(it, 100, BufferKind::kActivation);
    AddTimedOp(it, Phase::kForward, {}, {x}, 10);   // 0
    AddTimedOp(it, Phase::kForward, {x}, {z}, 10);  // 1
    AddTimedOp(it, Phase::kForward, {}, {}, 10);    // 2
    AddTimedOp(it, Phase::kForward, {}, {}, 10);    // 3
    AddTimedOp(it, Phase::kBackward, {z}, {}, 10);  // 4
    trace::Event free;
    free.kind = trace::EventKind::kFreeRequested;
    free.before_op = 3;
    free.buffer = x;
    it.events.push_back(free);
  }
};

TEST(Checker, CatchesARecomputeFromMemoryTheApplicationFreed) {
  FreedInput c;
  const SimInput in = MakeSimInput(c.it, testing::NanosecondProfile(), 1000);
  EXPECT_EQ(in.access.freed_before[c.x], 3u);
  EXPECT_EQ(in.access.freed_before[c.z], trace::kNone);
  const Plan from_x = testing::PlanOf({testing::Discard(c.z, 1), testing::Recompute({1}, 4)});
  const SimResult r = Simulate(in, from_x, {.record_events = true});
  ASSERT_TRUE(r.feasible) << r.reason;
  const Status st = CheckSchedule(in, from_x, r);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("reads buffer 0, which the application freed before op 3"), std::string::npos)
      << st.message();
  // Rebuilding x first (into memory of the recompute's own) is fine.
  const Plan rebuilt = testing::PlanOf({testing::Discard(c.z, 1), testing::Recompute({0, 1}, 4)});
  const SimResult r2 = Simulate(in, rebuilt, {.record_events = true});
  ASSERT_TRUE(r2.feasible) << r2.reason;
  const Status st2 = CheckSchedule(in, rebuilt, r2);
  EXPECT_TRUE(st2.ok()) << st2.message();
}

TEST(Checker, ARecomputeChainRebuildsAnInputTheApplicationFreed) {
  FreedInput c;
  SimInput in = MakeSimInput(c.it, testing::NanosecondProfile(), 1000);
  const std::vector<bool> on_device(c.it.buffers.size(), true);
  {
    const PlanningModel m = BuildPlanningModel(in);
    auto ops = ResolveRecompute(m, {c.z}, 4, on_device);
    ASSERT_TRUE(ops.ok()) << ops.status().message();
    EXPECT_EQ(*ops, (std::vector<trace::OpId>{0, 1}));
    // Before the free, x is there to read.
    auto early = ResolveRecompute(m, {c.z}, 2, on_device);
    ASSERT_TRUE(early.ok()) << early.status().message();
    EXPECT_EQ(*early, (std::vector<trace::OpId>{1}));
  }
  in.access.recomputable[0] = false;
  const PlanningModel m = BuildPlanningModel(in);
  EXPECT_FALSE(ResolveRecompute(m, {c.z}, 3, on_device).ok());  // from op 3 on, x is gone
}

// Memory a caching allocator hands from one tensor to the next within the forward pass: a holds a1 = f(x) (op 1,
// read by op 2), then a2 = h(y) (op 3, updated in place by op 4), which the backward pass reads (op 6). Every op
// runs 10 us, long enough to be a layer of its own.
struct ReusedMemory {
  trace::Iteration it;
  trace::BufferId x, a, y;
  explicit ReusedMemory(bool a2_read_late = true) {
    x = testing::AddBuffer(it, 100, BufferKind::kActivation);
    a = testing::AddBuffer(it, 100, BufferKind::kOther);
    y = testing::AddBuffer(it, 100, BufferKind::kActivation);
    AddTimedOp(it, Phase::kForward, {}, {x}, 10000);         // 0
    AddTimedOp(it, Phase::kForward, {x}, {a}, 10000);        // 1: a1
    AddTimedOp(it, Phase::kForward, {a}, {y}, 10000);        // 2
    AddTimedOp(it, Phase::kForward, {y}, {a}, 10000);        // 3: a2
    AddTimedOp(it, Phase::kForward, {a}, {a}, 10000);        // 4: a2 updated
    AddTimedOp(it, Phase::kBackward, {y}, {}, 10000);        // 5
    AddTimedOp(it, Phase::kBackward, a2_read_late ? std::vector<trace::BufferId>{a} : std::vector<trace::BufferId>{},
               {}, 10000);                                   // 6
  }
};

// A block may start between two values of one buffer (value cuts), not inside one; buffer cuts take the buffer's
// whole forward write span.
TEST(PlanningModel, CutsBetweenTheValuesOfReusedMemory) {
  ReusedMemory c;
  const SimInput in = MakeSimInput(c.it, testing::NanosecondProfile(), 1000);
  const PlanningModel m = BuildPlanningModel(in);
  ASSERT_EQ(m.forward_end, 5u);
  EXPECT_EQ(m.clean_cut, (std::vector<bool>{true, true, true, true, false, false, false}));
  EXPECT_EQ(m.buffer_cut, (std::vector<bool>{true, true, false, false, false, false, false}));
}

// Rebuilding y re-runs op 1, which writes a1 over a, where a2 lives by then (written by op 3, read by op 6 or
// not at all). Where a2 is read, a1 would go to scratch memory (ScratchOutputs) and a2 stay, on the device or off
// it; the planner takes that only beside a target of the same op (a fused op's second output), not for an
// intermediate: refused. Where a2 is never read, a1 goes over it.
// A chain that reads a value of a written outside it after its own write is no such case at all.
TEST(Checker, ARecomputeWritesAnOldValueOfReusedMemoryToScratch) {
  for (const bool late : {true, false}) {
    ReusedMemory c(late);
    const SimInput in = MakeSimInput(c.it, testing::NanosecondProfile(), 1000);
    const PlanningModel m = BuildPlanningModel(in);
    std::vector<bool> available(c.it.buffers.size(), true);
    available[c.a] = false;
    available[c.y] = false;
    auto ops = ResolveRecompute(m, {c.y}, 5, available);
    if (late) {
      EXPECT_EQ(ScratchOutputs(in.access, {1, 2}, 5), (std::vector<trace::BufferId>{c.a}));
      ASSERT_FALSE(ops.ok());
      EXPECT_NE(ops.status().message().find("into scratch"), std::string::npos) << ops.status().message();
    } else {  // a2 is never read: a1 may go over it
      EXPECT_TRUE(ScratchOutputs(in.access, {1, 2}, 5).empty());
      ASSERT_TRUE(ops.ok()) << ops.status().message();
      EXPECT_EQ(*ops, (std::vector<trace::OpId>{1, 2}));
    }
  }
  {
    // Op 1 writes z, the target, and a, which op 3 gives to a later tensor: a goes to scratch.
    trace::Iteration f;
    const trace::BufferId x = testing::AddBuffer(f, 100, BufferKind::kActivation);
    const trace::BufferId z = testing::AddBuffer(f, 100, BufferKind::kActivation);
    const trace::BufferId a = testing::AddBuffer(f, 100, BufferKind::kOther);
    const trace::BufferId w = testing::AddBuffer(f, 100, BufferKind::kActivation);
    AddTimedOp(f, Phase::kForward, {}, {x}, 10000);      // 0
    AddTimedOp(f, Phase::kForward, {x}, {z, a}, 10000);  // 1
    AddTimedOp(f, Phase::kForward, {a}, {w}, 10000);     // 2
    AddTimedOp(f, Phase::kForward, {w}, {a}, 10000);     // 3
    AddTimedOp(f, Phase::kBackward, {z}, {}, 10000);     // 4
    AddTimedOp(f, Phase::kBackward, {a}, {}, 10000);     // 5
    const SimInput fin = MakeSimInput(f, testing::NanosecondProfile(), 1000);
    const PlanningModel fm = BuildPlanningModel(fin);
    std::vector<bool> available(f.buffers.size(), true);
    available[z] = false;
    available[a] = false;
    auto ops = ResolveRecompute(fm, {z}, 4, available);
    ASSERT_TRUE(ops.ok()) << ops.status().message();
    EXPECT_EQ(*ops, (std::vector<trace::OpId>{1}));
    EXPECT_EQ(ScratchOutputs(fin.access, *ops, 4), (std::vector<trace::BufferId>{a}));
  }
  {
    // a2 swapped out after op 4 and back for op 6 around the recompute: the plan simulates, passes the checker
    // (op 6 reads a2), and needs room for a1 in scratch while the recompute runs.
    ReusedMemory c;
    const SimInput in = MakeSimInput(c.it, testing::NanosecondProfile(), 1000);
    Plan plan = testing::PlanOf({testing::Discard(c.y, 3), testing::SwapOut(c.a, 4), testing::SwapIn(c.a, 5, 6)});
    Action rc = testing::Recompute({1, 2}, 5);
    rc.scratch = ScratchOutputs(in.access, rc.ops, 5);
    ASSERT_EQ(rc.scratch, (std::vector<trace::BufferId>{c.a}));
    plan.actions.push_back(rc);
    plan.managed_memory = true;
    const SimResult r = Simulate(in, plan, {.record_events = true});
    ASSERT_TRUE(r.feasible) << r.reason;
    EXPECT_TRUE(CheckSchedule(in, plan, r).ok()) << CheckSchedule(in, plan, r).message();
    EXPECT_EQ(r.peak_bytes, 300u);  // x, y rebuilt, a1 in scratch (a2 is on the host)
    Action in_place = rc;
    in_place.scratch.clear();  // a1 written over a while a2 is on the host: the swap-in finds no valid copy
    plan.actions.back() = in_place;
    EXPECT_FALSE(Simulate(in, plan).feasible);

    // A chain {1, 3} whose op 3 reads the value op 2 (outside it) wrote over its own: a is not scratch.
    trace::Iteration d;
    const trace::BufferId x = testing::AddBuffer(d, 100, BufferKind::kActivation);
    const trace::BufferId a = testing::AddBuffer(d, 100, BufferKind::kOther);
    const trace::BufferId y = testing::AddBuffer(d, 100, BufferKind::kActivation);
    AddTimedOp(d, Phase::kForward, {}, {x}, 10000);   // 0
    AddTimedOp(d, Phase::kForward, {x}, {a}, 10000);  // 1
    AddTimedOp(d, Phase::kForward, {}, {a}, 10000);   // 2
    AddTimedOp(d, Phase::kForward, {a}, {y}, 10000);  // 3
    AddTimedOp(d, Phase::kBackward, {y}, {}, 10000);  // 4
    const SimInput din = MakeSimInput(d, testing::NanosecondProfile(), 1000);
    EXPECT_TRUE(ScratchOutputs(din.access, {1, 3}, 4).empty());
  }
  ReusedMemory c;
  trace::Event free;
  free.kind = trace::EventKind::kFreeRequested;
  free.before_op = 5;
  free.buffer = c.a;
  c.it.events.push_back(free);
  c.it.ops[6].reads.clear();  // a freed memory is not read
  const SimInput in = MakeSimInput(c.it, testing::NanosecondProfile(), 1000);
  const PlanningModel m = BuildPlanningModel(in);
  std::vector<bool> available(c.it.buffers.size(), false);
  available[c.x] = true;
  EXPECT_TRUE(ResolveRecompute(m, {c.y}, 5, available).ok());
}

TEST(Checker, RefusesAnInfeasibleOrEmptySimulation) {
  SkipCase c;
  const SimInput in = MakeSimInput(c.it, testing::NanosecondProfile(), 1000);
  SimResult no_events = Simulate(in, c.plan);
  EXPECT_FALSE(CheckSchedule(in, c.plan, no_events).ok());
  SimResult infeasible;
  infeasible.reason = "test";
  EXPECT_FALSE(CheckSchedule(in, c.plan, infeasible).ok());
}

}  // namespace
}  // namespace karma::policy
