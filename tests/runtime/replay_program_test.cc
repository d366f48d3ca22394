// Compiling plans for the executor: which plan discards become discards (poisoning managed memory) and which
// become evictions; the iteration the runtime plans on, its plan key, and the bar Planner II must beat.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/plan/planning.h"
#include "runtime/replay/replay_program.h"
#include "tests/planner/planner_test_util.h"

namespace karma::rt {
namespace {

// Five ops: 0 writes buffer 0 (forward), 1 reads it, 2 does not touch it, 3 reads it when `read_at_3`, 4 reads it
// (backward).
RecordedIteration FiveOps(bool read_at_3) {
  RecordedIteration rec;
  rec.it.model = "five";
  for (trace::BufferId b = 0; b < 2; ++b) {
    trace::Buffer buf;
    buf.id = b;
    buf.bytes = 4u << 20;
    buf.kind = trace::BufferKind::kActivation;
    rec.it.buffers.push_back(buf);
  }
  std::vector<std::vector<trace::BufferId>> reads = {{}, {0}, {1}, {1}, {0, 1}};
  if (read_at_3) reads[3] = {0, 1};
  const std::vector<std::vector<trace::BufferId>> writes = {{0}, {1}, {1}, {1}, {}};
  for (uint32_t i = 0; i < 5; ++i) {
    trace::Op op;
    op.id = i;
    op.name = "k" + std::to_string(i);
    op.phase = i < 4 ? trace::Phase::kForward : trace::Phase::kBackward;
    op.reads = reads[i];
    op.writes = writes[i];
    rec.it.ops.push_back(op);
    ReplayOp r;
    r.relaunch = std::make_shared<const std::function<bool(const AddressMap&)>>(
        [](const AddressMap&) { return true; });
    rec.ops.push_back(r);
  }
  for (size_t b = 0; b < 2; ++b) {
    ReplayBuffer rb;
    rb.address = (b + 1) << 24;
    rb.bytes = rec.it.buffers[b].bytes;
    rb.exact = true;
    rb.allocated_inside = true;
    rb.alloc_ordinal = static_cast<uint32_t>(b);
    rec.buffers.push_back(rb);
  }
  rec.allocations = 2;
  return rec;
}

policy::Action Act(policy::ActionKind kind, trace::BufferId b, int32_t after, uint32_t before = trace::kNone) {
  policy::Action a;
  a.kind = kind;
  a.buffer = b;
  a.after = after;
  a.before = before;
  return a;
}

ReplayProgram::Move MoveOf(const ReplayProgram& p, uint32_t entry, trace::BufferId b) {
  for (const ReplayProgram::Item& it : p.after[entry]) {
    if (it.buffer == b) return it.move;
  }
  ADD_FAILURE() << "no item for buffer " << b << " after entry " << entry;
  return ReplayProgram::Move::kPrefetch;
}

policy::Plan RecomputeOp0Before4() {
  policy::Plan plan;
  plan.strategy = "karma";
  plan.managed_memory = true;
  plan.actions.push_back(testing::Recompute({0}, 4));
  return plan;
}

TEST(CompileProgram, DiscardRebuiltByARecomputeIsADiscard) {
  const RecordedIteration rec = FiveOps(false);
  policy::Plan plan = RecomputeOp0Before4();
  plan.actions.push_back(Act(policy::ActionKind::kDiscard, 0, 1));
  auto prog = CompileProgram(rec, plan);
  ASSERT_TRUE(prog.ok()) << prog.status().message();
  EXPECT_EQ(MoveOf(**prog, 2, 0), ReplayProgram::Move::kDiscard);
  ASSERT_EQ((*prog)->recomputes.size(), 1u);
  EXPECT_EQ((*prog)->recomputes[0].targets, std::vector<trace::BufferId>{0});
}

// Without an action, the plan frees buffer 0 after op 1, its last read: its next use is the recompute's write
// before op 4 (policy::StaticMemory). The executor discards it there, and that recompute rebuilds it.
TEST(CompileProgram, AValueTheNextUseOfWhichIsARecomputesWriteIsDiscardedAfterItsLastRead) {
  const RecordedIteration rec = FiveOps(false);
  auto prog = CompileProgram(rec, RecomputeOp0Before4());
  ASSERT_TRUE(prog.ok()) << prog.status().message();
  ASSERT_EQ((*prog)->after[2].size(), 1u);
  EXPECT_EQ(MoveOf(**prog, 2, 0), ReplayProgram::Move::kDiscard);
  EXPECT_EQ((*prog)->after[2][0].recompute, 0u);
  EXPECT_EQ((*prog)->recomputes[0].targets, std::vector<trace::BufferId>{0});
  EXPECT_TRUE((*prog)->recomputes[0].dropped.empty());  // op 4 reads what it rebuilds
}

// A recompute before op 2 rebuilds buffer 0, which nothing reads before the next recompute writes it again (before
// op 4): the first one lets it go after its launches, and the second rebuilds it.
TEST(CompileProgram, AValueARecomputeWritesAndALaterOneWritesAgainIsDroppedAfterTheFirst) {
  const RecordedIteration rec = FiveOps(false);
  policy::Plan plan = RecomputeOp0Before4();
  plan.actions.insert(plan.actions.begin(), testing::Recompute({0}, 2));
  auto prog = CompileProgram(rec, plan);
  ASSERT_TRUE(prog.ok()) << prog.status().message();
  const auto& rc = (*prog)->recomputes;
  ASSERT_EQ(rc.size(), 2u);
  ASSERT_EQ(rc[0].before, 2u);
  ASSERT_EQ(rc[0].dropped.size(), 1u);
  EXPECT_EQ(rc[0].dropped[0].buffer, 0u);
  EXPECT_EQ(rc[0].dropped[0].rebuilt_by, 1u);
  EXPECT_EQ(rc[1].targets, std::vector<trace::BufferId>{0});
  EXPECT_EQ(MoveOf(**prog, 2, 0), ReplayProgram::Move::kDiscard);  // after op 1, rebuilt before op 2
  EXPECT_EQ((*prog)->after[2][0].recompute, 0u);
}

// The plan drops the device copy after op 1 and brings the host's value back after op 2 for op 3, which reads
// it before the recompute that writes the buffer: the value lives on, so the executor must evict, not discard
// (a discard would poison the only copy managed memory has, and the swap-in would bring the poison back).
TEST(CompileProgram, DiscardWhoseValueIsReadBeforeTheRebuildIsAnEviction) {
  const RecordedIteration rec = FiveOps(true);
  policy::Plan plan = RecomputeOp0Before4();
  plan.actions.push_back(Act(policy::ActionKind::kDiscard, 0, 1));
  plan.actions.push_back(Act(policy::ActionKind::kSwapIn, 0, 2, 3));
  auto prog = CompileProgram(rec, plan);
  ASSERT_TRUE(prog.ok()) << prog.status().message();
  EXPECT_EQ(MoveOf(**prog, 2, 0), ReplayProgram::Move::kEvict);
  EXPECT_EQ(MoveOf(**prog, 3, 0), ReplayProgram::Move::kPrefetch);
  // After op 3, its last read, the value is dead for the plan (the recompute writes it next): discarded there, and
  // the recompute rebuilds it.
  EXPECT_EQ(MoveOf(**prog, 4, 0), ReplayProgram::Move::kDiscard);
  EXPECT_EQ((*prog)->recomputes[0].targets, std::vector<trace::BufferId>{0});
}

// A swap-in that nothing reads before the rebuild does not keep the value: the discard stands.
TEST(CompileProgram, DiscardSwappedInButNotReadBeforeTheRebuildIsADiscard) {
  const RecordedIteration rec = FiveOps(false);
  policy::Plan plan = RecomputeOp0Before4();
  plan.actions.push_back(Act(policy::ActionKind::kDiscard, 0, 1));
  plan.actions.push_back(Act(policy::ActionKind::kSwapIn, 0, 2, 3));
  auto prog = CompileProgram(rec, plan);
  ASSERT_TRUE(prog.ok()) << prog.status().message();
  EXPECT_EQ(MoveOf(**prog, 2, 0), ReplayProgram::Move::kDiscard);
}

// On the copy path a swap-in goes out where the simulated plan could start it, not before: a fetch takes device
// memory when issued. Buffer 0 (4 MiB) leaves after op 0; ops 1-2 hold buffers 1 and 2 (8 MiB, the capacity) until
// op 2's end, so the plan's swap-in "after op 1" starts only then, before op 3. Managed memory's prefetch goes
// out at `after` (the driver evicts what it needs).
TEST(CompileProgram, ACopyPathSwapInGoesOutWhereTheSimulationStartedIt) {
  RecordedIteration rec;
  rec.it.model = "wait";
  constexpr uint64_t kMiB4 = 4u << 20;
  for (trace::BufferId b = 0; b < 3; ++b) {
    trace::Buffer buf;
    buf.id = b;
    buf.bytes = kMiB4;
    buf.kind = trace::BufferKind::kActivation;
    rec.it.buffers.push_back(buf);
    ReplayBuffer rb;
    rb.address = (b + 1ull) << 24;
    rb.bytes = kMiB4;
    rb.exact = true;
    rb.allocated_inside = true;
    rb.alloc_ordinal = b;
    rec.buffers.push_back(rb);
  }
  rec.allocations = 3;
  const std::vector<std::vector<trace::BufferId>> reads = {{}, {}, {1, 2}, {}, {0}};
  const std::vector<std::vector<trace::BufferId>> writes = {{0}, {1, 2}, {}, {}, {}};
  for (uint32_t i = 0; i < 5; ++i) {
    testing::AddTimedOp(rec.it, i < 4 ? trace::Phase::kForward : trace::Phase::kBackward, reads[i], writes[i], 1000);
    ReplayOp r;
    r.relaunch = std::make_shared<const std::function<bool(const AddressMap&)>>([](const AddressMap&) { return true; });
    rec.ops.push_back(r);
  }
  policy::Plan plan = testing::PlanOf({testing::SwapOut(0, 0), testing::SwapIn(0, 1, 4)});
  plan.capacity_bytes = 2 * kMiB4;
  policy::HwProfile copy = testing::NanosecondProfile();
  copy.moves = policy::MovePath::kCopy;
  // The entry whose moves hold buffer 0's prefetch.
  auto prefetch_entry = [](const ReplayProgram& p) {
    for (uint32_t k = 0; k < p.after.size(); ++k) {
      for (const ReplayProgram::Item& item : p.after[k]) {
        if (item.buffer == 0 && item.move == ReplayProgram::Move::kPrefetch) return static_cast<int>(k);
      }
    }
    return -1;
  };
  auto prog = CompileProgram(rec, plan, copy);
  ASSERT_TRUE(prog.ok()) << prog.status().message();
  EXPECT_EQ(prefetch_entry(**prog), 3);
  auto as_planned = CompileProgram(rec, plan, testing::NanosecondProfile());
  ASSERT_TRUE(as_planned.ok()) << as_planned.status().message();
  EXPECT_EQ(prefetch_entry(**as_planned), 2);
}

// Another recompute that reads the buffer before the rebuild needs its value too.
TEST(CompileProgram, DiscardReadByAnEarlierRecomputeIsAnEviction) {
  const RecordedIteration rec = FiveOps(false);
  policy::Plan plan = RecomputeOp0Before4();
  plan.actions.insert(plan.actions.begin(), testing::Recompute({1}, 3));
  plan.actions.push_back(Act(policy::ActionKind::kDiscard, 0, 1));
  auto prog = CompileProgram(rec, plan);
  ASSERT_TRUE(prog.ok()) << prog.status().message();
  EXPECT_EQ(MoveOf(**prog, 2, 0), ReplayProgram::Move::kEvict);
}

TEST(PlanningIteration, RoundsLargeBuffersToPagesMovesTheirBytesHoldsLateFreedBuffersUntilTheirFreeAndKeptMemoryLive) {
  trace::Iteration it;
  const uint64_t sizes[] = {(3u << 20) + 1, 1u << 20, 3u << 20, (3u << 19) + 100};
  for (trace::BufferId b = 0; b < 4; ++b) {
    trace::Buffer buf;
    buf.id = b;
    buf.bytes = sizes[b];
    it.buffers.push_back(buf);
  }
  // Buffer 0: allocated before op 0, last used by op 1, freed before op 4. Buffer 1: allocated before op 1, freed
  // right after its last use (op 1). Buffer 2: memory the application keeps (allocated before the iteration, never
  // freed in it), written by op 2, last used by op 3.
  const std::vector<std::vector<trace::BufferId>> reads = {{}, {0}, {}, {2}, {}};
  const std::vector<std::vector<trace::BufferId>> writes = {{0}, {1}, {2}, {}, {}};
  for (uint32_t i = 0; i < 5; ++i) {
    trace::Op op;
    op.id = i;
    op.name = "k" + std::to_string(i);
    op.reads = reads[i];
    op.writes = writes[i];
    it.ops.push_back(op);
  }
  for (const auto& [b, before] : std::vector<std::pair<trace::BufferId, uint32_t>>{{0, 4}, {1, 2}}) {
    trace::Event e;
    e.kind = trace::EventKind::kFreeRequested;
    e.buffer = b;
    e.before_op = before;
    it.events.push_back(e);
    e.kind = trace::EventKind::kAlloc;
    e.before_op = b;
    it.events.push_back(e);
  }
  const trace::Iteration p = PlanningIteration(it, policy::DefaultProfile());
  EXPECT_EQ(p.buffers[0].bytes, (3u << 20) + kResidencyPage);  // its last page is its own
  EXPECT_EQ(p.buffers[1].bytes, 1u << 20);  // packed into a slab with others
  EXPECT_EQ(p.buffers[2].bytes, 3u << 20);
  EXPECT_EQ(p.buffers[3].bytes, (3u << 19) + kResidencyPage);
  EXPECT_EQ(p.ops[3].reads, (std::vector<trace::BufferId>{2, 0}));  // held on the device until its free
  // Its value lives from one iteration to the next as far as the plan knows: the write at its first use reads it.
  EXPECT_EQ(p.ops[2].reads, (std::vector<trace::BufferId>{2}));
  EXPECT_TRUE(p.ops[4].reads.empty());
  for (uint32_t i : {0u, 1u}) EXPECT_EQ(p.ops[i].reads, it.ops[i].reads);
  for (const trace::Buffer& b : p.buffers) EXPECT_EQ(b.moved_bytes, 0u);  // managed memory moves whole pages
  // On the copy path a buffer takes whole 2 MiB chunks, and a move copies its own bytes.
  policy::HwProfile copy = policy::DefaultProfile();
  copy.moves = policy::MovePath::kCopy;
  const trace::Iteration c = PlanningIteration(it, copy);
  EXPECT_EQ(c.buffers[0].bytes, 4u << 20);
  EXPECT_EQ(c.buffers[0].MovedBytes(), (3u << 20) + 1);
  EXPECT_EQ(c.buffers[1].bytes, 1u << 20);  // in a slab
  EXPECT_EQ(c.buffers[1].moved_bytes, 0u);
  EXPECT_EQ(c.buffers[2].bytes, 4u << 20);
  EXPECT_EQ(c.buffers[2].MovedBytes(), 3u << 20);
}

// Small buffers the application keeps, packed into a slab: the executor moves only the pages each owns, so the
// plan counts those, and the pages they share stay on the device (UnmovableBytes, out of the planner's capacity).
TEST(PlanningIteration, KeptSmallBuffersCountTheirOwnPagesAndTheSharedOnesAreUnmovable) {
  constexpr uint64_t kSlab = 1ull << 32, K = 1024;
  trace::Iteration it;
  // Kept: [0, 100K), [100K, 300K), [300K, 328K) of one slab; then one allocated in the iteration, and a large one.
  const std::vector<std::pair<uint64_t, uint64_t>> spans = {
      {kSlab, 100 * K}, {kSlab + 100 * K, 200 * K}, {kSlab + 300 * K, 28 * K}, {kSlab + 328 * K, 200 * K},
      {kSlab + (4u << 20), 3u << 20}};
  for (trace::BufferId b = 0; b < spans.size(); ++b) {
    trace::Buffer buf;
    buf.id = b;
    buf.address = spans[b].first;
    buf.bytes = spans[b].second;
    it.buffers.push_back(buf);
  }
  trace::Op op;
  op.name = "k0";
  op.reads = {0, 1, 2, 4};
  op.writes = {3};
  it.ops.push_back(op);
  trace::Event alloc;
  alloc.kind = trace::EventKind::kAlloc;
  alloc.buffer = 3;
  it.events.push_back(alloc);
  const trace::Iteration p = PlanningIteration(it, policy::DefaultProfile());
  EXPECT_EQ(p.buffers[0].bytes, 64 * K);   // page 0; page 1 it shares with buffer 1
  EXPECT_EQ(p.buffers[1].bytes, 128 * K);  // pages 2 and 3; 1 and 4 are shared
  EXPECT_EQ(p.buffers[2].bytes, 0u);       // pages 4 and 5, both shared
  EXPECT_EQ(p.buffers[3].bytes, 200 * K);  // allocated in the iteration: its bytes, as before
  EXPECT_EQ(p.buffers[4].bytes, 3u << 20);
  // Pages 1, 4 and 5 (buffer 3, allocated in the iteration, is not counted: its pages are its slab's to move).
  EXPECT_EQ(UnmovableBytes(it, policy::DefaultProfile()), 3 * 64 * K);
  // On the copy path the page is the 2 MiB chunk: the three share the slab's first one.
  policy::HwProfile copy = policy::DefaultProfile();
  copy.moves = policy::MovePath::kCopy;
  const trace::Iteration c = PlanningIteration(it, copy);
  for (trace::BufferId b : {0u, 1u, 2u}) EXPECT_EQ(c.buffers[b].bytes, 0u) << b;
  EXPECT_EQ(UnmovableBytes(it, copy), 2u << 20);
  trace::Iteration none = it;
  none.buffers.resize(2);
  none.buffers[0].bytes = 64 * K;  // owns page 0 whole
  none.buffers[1].address = kSlab + (2u << 20);
  none.buffers[1].bytes = 128 * K;
  EXPECT_EQ(UnmovableBytes(none, policy::DefaultProfile()), 0u);
}

// The plan cache key changes with what changes the plan: the inputs, the ops excluded from recompute, and the
// planner's version (a plan an older planner made is not reused).
TEST(ProfileForDevice, ChoosesTheProfileByTheDevicesName) {
  EXPECT_STREQ(ProfileForDevice("Tesla V100-SXM2-16GB").name, "v100-16g-pcie3");
  EXPECT_STREQ(ProfileForDevice("NVIDIA A100-SXM4-40GB").name, "a100-40g-pcie4");
  const policy::HwProfile& h100 = ProfileForDevice("NVIDIA H100 80GB HBM3");
  EXPECT_STREQ(h100.name, "h100-80g");
  EXPECT_EQ(h100.moves, policy::MovePath::kManaged);  // the executor's moves: managed memory's measured rates
  EXPECT_DOUBLE_EQ(h100.h2d_bw(), h100.managed.h2d_bw);
  EXPECT_STREQ(ProfileForDevice("NVIDIA H200").name, "h100-80g");  // the same host link
  EXPECT_STREQ(ProfileForDevice("NVIDIA GH200 480GB").name, policy::DefaultProfile().name);  // NVLink-C2C
  EXPECT_STREQ(ProfileForDevice("simcuda").name, policy::DefaultProfile().name);
}

TEST(PlanKey, NamesTheInputsTheExclusionsAndThePlannerVersion) {
  const RecordedIteration rec = FiveOps(false);
  const policy::HwProfile& hw = policy::DefaultProfile();
  const std::string key = PlanKey(rec.it, hw, 1 << 20, {});
  EXPECT_EQ(key, PlanKey(rec.it, hw, 1 << 20, {}));
  EXPECT_NE(key, PlanKey(rec.it, hw, 2 << 20, {}));
  EXPECT_NE(key, PlanKey(rec.it, hw, 1 << 20, PlanFlags{{false, true}, {}}));
  // Buffers homed on the host (data parallel) make another plan too, not the same as excluding the same ops.
  EXPECT_NE(key, PlanKey(rec.it, hw, 1 << 20, PlanFlags{{}, {false, true}}));
  EXPECT_NE(PlanKey(rec.it, hw, 1 << 20, PlanFlags{{}, {false, true}}), PlanKey(rec.it, hw, 1 << 20, PlanFlags{{false, true}, {}}));
  EXPECT_EQ(key.find(policy::Fingerprint(rec.it, hw.name, 1 << 20)), std::string::npos);
}

// A profile with measured link rates makes its own plan key, and a plan
// made with it is recognised by its label (KARMA_MODE=replay); planning again only when the rates depart enough.
TEST(PlanKey, NamesMeasuredLinkRates) {
  const RecordedIteration rec = FiveOps(false);
  const policy::HwProfile& hw = policy::DefaultProfile();  // 12 GB/s each way
  EXPECT_EQ(PlanKey(rec.it, policy::WithLink(hw, 0, 0), 1 << 20, {}), PlanKey(rec.it, hw, 1 << 20, {}));
  const policy::HwProfile slow = policy::WithLink(hw, 6e9, 0);
  EXPECT_NE(PlanKey(rec.it, slow, 1 << 20, {}), PlanKey(rec.it, hw, 1 << 20, {}));
  EXPECT_NE(PlanKey(rec.it, policy::WithLink(hw, 6.1e9, 0), 1 << 20, {}), PlanKey(rec.it, slow, 1 << 20, {}));
  policy::HwProfile back;
  ASSERT_TRUE(policy::ProfileFromLabel(hw, policy::ProfileLabel(slow), &back));
  EXPECT_EQ(PlanKey(rec.it, back, 1 << 20, {}), PlanKey(rec.it, slow, 1 << 20, {}));

  EXPECT_FALSE(LinkDeparts(hw, 0, 0));
  EXPECT_FALSE(LinkDeparts(hw, 0.85 * hw.h2d_bw(), 1.2 * hw.d2h_bw()));
  EXPECT_TRUE(LinkDeparts(hw, 0.75 * hw.h2d_bw(), 0));
  EXPECT_TRUE(LinkDeparts(hw, 0, 1.3 * hw.d2h_bw()));
  EXPECT_FALSE(LinkDeparts(slow, 6.2e9, 0));
}

// Planner II improves on the plan already running: its outcome says whether it beat the bar it was given, and
// only a plan that did is written to the cache directory.
TEST(MakeRuntimePlan, PlannerIIsPlanIsSavedOnlyWhenFasterThanAsked) {
  const RecordedIteration rec = FiveOps(false);
  char dir[] = "/tmp/karma-plan-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  PlanRequest req;
  req.recorded = &rec;
  req.profile = policy::DefaultProfile();
  req.capacity = 6u << 20;  // the two 4 MiB buffers do not fit together
  req.cache_dir = dir;
  auto first = MakeRuntimePlan(req);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_TRUE(first->improves);
  ASSERT_GT(first->simulated_s, 0);
  req.ilp = true;
  for (const double bar : {0.5, 2.0}) {
    req.improve_on_s = bar * first->simulated_s;
    auto better = MakeRuntimePlan(req);
    ASSERT_TRUE(better.ok()) << better.status().message();
    EXPECT_EQ(better->improves, better->simulated_s < req.improve_on_s) << bar;
    // Planner II starts from Planner I's plan (never slower) and, on five ops, finds nothing twice as fast.
    EXPECT_EQ(better->improves, bar > 1) << bar;
    EXPECT_EQ(better->path.empty(), !better->improves) << bar;
  }
  std::filesystem::remove_all(dir);
}

// Ops whose own buffers exceed the budget are counted and the largest is named, with what would avoid paging it.
TEST(MakeRuntimePlan, NamesTheLargestOpThatExceedsTheBudget) {
  const RecordedIteration rec = FiveOps(false);
  PlanRequest req;
  req.recorded = &rec;
  req.profile = policy::DefaultProfile();
  req.capacity = 16u << 20;  // everything fits
  auto roomy = MakeRuntimePlan(req);
  ASSERT_TRUE(roomy.ok()) << roomy.status().message();
  EXPECT_EQ(roomy->paged_ops, 0u);
  EXPECT_EQ(roomy->incore_peak_bytes, 8u << 20);  // both buffers live from op 1 to op 4
  EXPECT_EQ(DescribePagedOps(*roomy, rec.it, req.capacity, 0), "");
  // Ops 1 (reads buffer 0, writes buffer 1) and 4 (reads both) use 8 MiB each; the others 4 MiB.
  req.capacity = 6u << 20;
  auto tight = MakeRuntimePlan(req);
  ASSERT_TRUE(tight.ok()) << tight.status().message();
  EXPECT_EQ(tight->paged_ops, 2u);
  EXPECT_EQ(tight->incore_peak_bytes, 8u << 20);  // the iteration's, whatever the budget
  EXPECT_EQ(tight->largest_op, 1u);
  EXPECT_EQ(tight->largest_op_bytes, 8u << 20);
  const std::string line = DescribePagedOps(*tight, rec.it, req.capacity, 16u << 20);
  EXPECT_NE(line.find("op 1 (k1) alone uses 8.00 MiB, more than the budget 6.00 MiB (and 1 more"), std::string::npos)
      << line;
  EXPECT_NE(line.find("KARMA_CAPACITY=8.00 MiB or more"), std::string::npos) << line;
  // A device smaller than the op: only a smaller batch helps.
  const std::string small = DescribePagedOps(*tight, rec.it, req.capacity, 7u << 20);
  EXPECT_EQ(small.find("KARMA_CAPACITY"), std::string::npos) << small;
  EXPECT_NE(small.find("the device has 7.00 MiB: a smaller batch"), std::string::npos) << small;
}

// Memory the application frees after its last use counts in what it holds, not in the plan's in-core peak: above the
// budget the user is told.
TEST(MakeRuntimePlan, NamesMemoryTheApplicationHoldsAfterItsLastUse) {
  // Buffer 0 lives through ops 0-1, buffer 1 through ops 2-4: 4 MiB at once, as the values go.
  RecordedIteration rec = FiveOps(false);
  const std::vector<std::vector<trace::BufferId>> reads = {{}, {0}, {}, {1}, {1}};
  const std::vector<std::vector<trace::BufferId>> writes = {{0}, {}, {1}, {1}, {}};
  for (uint32_t i = 0; i < 5; ++i) {
    rec.it.ops[i].reads = reads[i];
    rec.it.ops[i].writes = writes[i];
  }
  rec.it.events.push_back(trace::Event{trace::EventKind::kAlloc, 0, 0, 0});
  rec.it.events.push_back(trace::Event{trace::EventKind::kAlloc, 2, 1, 0});
  PlanRequest req;
  req.recorded = &rec;
  req.profile = policy::DefaultProfile();
  req.capacity = 6u << 20;
  // The application frees buffer 0 only after the iteration: it holds 8 MiB from op 2 on.
  auto late = MakeRuntimePlan(req);
  ASSERT_TRUE(late.ok()) << late.status().message();
  EXPECT_EQ(late->incore_peak_bytes, 4u << 20);
  EXPECT_EQ(late->held_peak_bytes, 8u << 20);
  EXPECT_EQ(late->late_freed_buffers, 1u);
  EXPECT_EQ(late->most_late_bytes, 4u << 20);
  const std::string line = DescribeLateFrees(*late, req.capacity);
  EXPECT_NE(line.find("the application holds up to 8.00 MiB at once, more than the budget 6.00 MiB: 1 buffers"),
            std::string::npos)
      << line;
  EXPECT_EQ(DescribeLateFrees(*late, 8u << 20), "");  // it fits
  // Freed later inside the iteration (before op 4, last used by op 1): the planning iteration holds it until then, so
  // the in-core peak counts it and nothing is late.
  rec.it.events.push_back(trace::Event{trace::EventKind::kFreeRequested, 4, 0, 0});
  auto inside = MakeRuntimePlan(req);
  ASSERT_TRUE(inside.ok()) << inside.status().message();
  EXPECT_EQ(inside->incore_peak_bytes, 8u << 20);
  EXPECT_EQ(inside->held_peak_bytes, 8u << 20);
  EXPECT_EQ(inside->late_freed_buffers, 0u);
  EXPECT_EQ(DescribeLateFrees(*inside, req.capacity), "");
  rec.it.events.pop_back();
  // Freed right after its last use: nothing to say.
  rec.it.events.push_back(trace::Event{trace::EventKind::kFreeRequested, 2, 0, 0});
  auto prompt = MakeRuntimePlan(req);
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  EXPECT_EQ(prompt->held_peak_bytes, 4u << 20);
  EXPECT_EQ(prompt->late_freed_buffers, 0u);
  EXPECT_EQ(DescribeLateFrees(*prompt, req.capacity), "");
}

// An empty karma plan over managed memory with `capacity` bytes.
policy::Plan ManagedPlan(uint64_t capacity) {
  policy::Plan plan;
  plan.strategy = "karma";
  plan.managed_memory = true;
  plan.capacity_bytes = capacity;
  return plan;
}

// FiveOps in memory the application allocated before the iteration and keeps (a caching allocator's segment),
// with extents not known exactly.
RecordedIteration FiveOpsInKeptMemory() {
  RecordedIteration rec = FiveOps(false);
  for (ReplayBuffer& rb : rec.buffers) {
    rb.exact = false;
    rb.allocated_inside = false;
  }
  rec.allocations = 0;
  return rec;
}

// Read duplication is counted, not acted on: buffer 1 comes back for op 4 (a plan swap-in), which only reads it,
// and leaves after it (a plan swap-out). Its host copy was current all along: a read-duplicated copy could have left
// without a write-back. With op 4 writing it, that eviction writes back a new value.
TEST(CompileProgram, EvictionsAReadDuplicatedCopyCouldSpareAreCounted) {
  for (const bool written : {false, true}) {
    RecordedIteration rec = FiveOpsInKeptMemory();
    for (ReplayBuffer& rb : rec.buffers) rb.origin = Origin::kArena;
    if (written) rec.it.ops[4].writes = {1};
    policy::Plan plan = ManagedPlan(4u << 20);
    plan.actions = {Act(policy::ActionKind::kSwapOut, 1, 3), Act(policy::ActionKind::kSwapIn, 1, 3, 4),
                    Act(policy::ActionKind::kSwapOut, 1, 4)};
    auto prog = CompileProgram(rec, plan);
    ASSERT_TRUE(prog.ok()) << prog.status().message();
    const ReplayProgram& p = **prog;
    EXPECT_EQ(MoveOf(p, 5, 1), ReplayProgram::Move::kEvict);
    EXPECT_EQ(p.duplicable, written ? 0u : 1u) << p.summary;
    EXPECT_EQ(p.duplicable_bytes, written ? 0u : 4u << 20);
    EXPECT_NE(p.summary.find(written ? "0 evictions follow a swap-in with no write in between (0 B"
                                     : "1 evictions follow a swap-in with no write in between (4.00 MiB"),
              std::string::npos)
        << p.summary;
  }
}

// A recompute's scratch outputs (policy::Action::scratch) are neither written nor used in place: the executor maps
// them to scratch memory, and nothing is discarded, rebuilt or kept live for them.
TEST(CompileProgram, ARecomputesScratchOutputsAreKeptApartFromTheBuffersItUses) {
  RecordedIteration rec = FiveOpsInKeptMemory();
  rec.buffers[1].exact = true;  // a recompute's outputs must be
  policy::Plan plan = ManagedPlan(64u << 20);
  policy::Action rc = testing::Recompute({1}, 4);  // op 1 writes buffer 1, which ops 2 and 3 write again
  rc.scratch = {1};
  plan.actions.push_back(rc);
  auto prog = CompileProgram(rec, plan);
  ASSERT_TRUE(prog.ok()) << prog.status().message();
  const ReplayProgram& p = **prog;
  ASSERT_EQ(p.recomputes.size(), 1u);
  EXPECT_EQ(p.recomputes[0].scratch, (std::vector<trace::BufferId>{1}));
  EXPECT_TRUE(p.recomputes[0].written.empty());
  EXPECT_EQ(p.recomputes[0].used, (std::vector<trace::BufferId>{0}));
  EXPECT_TRUE(p.recomputes[0].targets.empty());
}

// Memory the application keeps: a plan (from a file made elsewhere) that discards a dead value there gets an
// eviction, with its bytes, and nothing that brings it back or repopulates it (KARMA never drops a value there).
TEST(CompileProgram, ADiscardInMemoryTheApplicationKeepsIsAnEviction) {
  const RecordedIteration rec = FiveOpsInKeptMemory();
  policy::Plan plan = ManagedPlan(4u << 20);
  plan.actions = {Act(policy::ActionKind::kDiscard, 0, 1)};  // buffer 0's last use is op 4: dead after op 4
  plan.actions[0].after = 4;
  auto prog = CompileProgram(rec, plan);
  ASSERT_TRUE(prog.ok()) << prog.status().message();
  EXPECT_EQ(MoveOf(**prog, 5, 0), ReplayProgram::Move::kEvict);
  size_t items = 0;
  for (const auto& at : (*prog)->after) items += at.size();
  EXPECT_EQ(items, 1u);
  EXPECT_NE((*prog)->summary.find("0 prefetches, 1 evictions"), std::string::npos) << (*prog)->summary;
}

// Buffers the application allocates and frees inside the iteration are discarded by their free: nothing added.
TEST(CompileProgram, DeadValueTheApplicationFreesIsLeftToTheFree) {
  const RecordedIteration rec = FiveOps(false);
  policy::Plan plan;
  plan.strategy = "karma";
  plan.managed_memory = true;
  auto prog = CompileProgram(rec, plan);
  ASSERT_TRUE(prog.ok()) << prog.status().message();
  for (const auto& items : (*prog)->after) EXPECT_TRUE(items.empty());
}

}  // namespace
}  // namespace karma::rt
