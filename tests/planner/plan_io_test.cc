// Plan files: lossless round trip, version and shape checks, fingerprints, stage notation.
#include <gtest/gtest.h>

#include "policy/plan_io.h"
#include "policy/stages.h"
#include "policy/strategies.h"
#include "tests/planner/planner_test_util.h"

namespace karma::policy {
namespace {

Plan SamplePlan() {
  Plan p = testing::PlanOf({testing::SwapOut(3, 0, 2, true), testing::SwapIn(3, 4, 6), testing::Discard(5, kAtStart),
                            testing::Recompute({1, 2}, 7)});
  p.strategy = "karma";
  p.profile = "v100-16g-pcie3";
  p.capacity_bytes = 5ull << 30;
  p.fingerprint = "0123456789abcdef";
  p.host_resident = {0, 1};
  p.blocks = {{0, 3, BlockMode::kSwap}, {4, 9, BlockMode::kRecompute}, {10, 12, BlockMode::kKeep}};
  p.actions[1].block = 0;
  p.actions[3].scratch = {4};
  p.note = "sample";
  return p;
}

TEST(PlanIo, RoundTripsEveryField) {
  const Plan p = SamplePlan();
  auto back = PlanFromJson(PlanToJson(p));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, p);
}

// A recompute action names ops, never a buffer, with or without scratch outputs; a version-1 file's recompute
// (no "scratch") reads as one without scratch outputs.
TEST(PlanIo, RecomputeActionsCarryOpsAndOptionalScratchButNoBuffer) {
  Plan p = SamplePlan();
  p.actions[3].scratch.clear();
  const std::string text = PlanToJson(p, -1);
  EXPECT_EQ(text.find("\"buffer\":4294967295"), std::string::npos) << text;
  EXPECT_EQ(text.find("\"scratch\""), std::string::npos) << text;
  auto old = PlanFromJson(R"({"format": "karma-plan", "version": 1, "actions": [)"
                          R"({"kind": "recompute", "after": 6, "before": 7, "ops": [1, 2]}]})");
  ASSERT_TRUE(old.ok()) << old.status().message();
  ASSERT_EQ(old->actions.size(), 1u);
  EXPECT_EQ(old->actions[0].ops, (std::vector<trace::OpId>{1, 2}));
  EXPECT_TRUE(old->actions[0].scratch.empty());
}

TEST(PlanIo, RefusesNewerVersionsAndMalformedFiles) {
  std::string text = PlanToJson(SamplePlan());
  const std::string version = "\"version\": 2";
  ASSERT_NE(text.find(version), std::string::npos);
  std::string newer = text;
  newer.replace(newer.find(version), version.size(), "\"version\": 7");
  auto r = PlanFromJson(newer);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnsupported);
  EXPECT_NE(r.status().message().find("version 7"), std::string::npos);
  EXPECT_NE(r.status().message().find("version 2"), std::string::npos);
  for (const char* bad : {"", "[]", "{\"format\": \"karma-graph\", \"version\": 1}",
                          "{\"format\": \"karma-plan\", \"version\": 1, \"actions\": [{\"kind\": \"teleport\"}]}",
                          "{\"format\": \"karma-plan\", \"version\": 1, \"actions\": [{\"kind\": \"swap_in\"}]}"}) {
    EXPECT_FALSE(PlanFromJson(bad).ok()) << bad;
  }
  EXPECT_FALSE(ReadPlanFile("/nonexistent/plan.json").ok());
}

TEST(PlanIo, FingerprintsFollowTheInputs) {
  trace::Iteration it = testing::TinyMlp();
  const std::string f = Fingerprint(it, "v100-16g-pcie3", 1000);
  EXPECT_EQ(f.size(), 16u);
  EXPECT_EQ(f, Fingerprint(it, "v100-16g-pcie3", 1000));
  EXPECT_NE(f, Fingerprint(it, "v100-16g-pcie3", 1001));
  EXPECT_NE(f, Fingerprint(it, "a100-40g-pcie4", 1000));
  it.ops[2].flops += 1;
  EXPECT_NE(f, Fingerprint(it, "v100-16g-pcie3", 1000));
}

TEST(PlanIo, ShapeCheckNamesTheProblem) {
  const trace::Iteration it = testing::TinyMlp();
  EXPECT_TRUE(CheckPlanShape(testing::PlanOf({testing::SwapOut(3, 0), testing::SwapIn(3, 1, 5)}), it).ok());
  const Status st = CheckPlanShape(testing::PlanOf({testing::Recompute({42}, 3)}), it);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("op 42"), std::string::npos);
  Plan empty_recompute = testing::PlanOf({testing::Recompute({}, 3)});
  EXPECT_FALSE(CheckPlanShape(empty_recompute, it).ok());
}

TEST(Stages, TheNotationShowsBlocksWithTheTransfersBesideThem) {
  // Three forward ops in three blocks; the first block's output is swapped out while block 2 computes and
  // swapped in while block 3's backward runs.
  trace::Iteration it;
  using trace::BufferKind;
  using trace::Phase;
  const auto a = testing::AddBuffer(it, 100, BufferKind::kActivation);
  const auto b = testing::AddBuffer(it, 100, BufferKind::kActivation);
  const auto c = testing::AddBuffer(it, 100, BufferKind::kActivation);
  testing::AddTimedOp(it, Phase::kForward, {}, {a}, 100);       // 0: F1
  testing::AddTimedOp(it, Phase::kForward, {a}, {b}, 100);      // 1: F2
  testing::AddTimedOp(it, Phase::kForward, {b}, {c}, 100);      // 2: F3
  testing::AddTimedOp(it, Phase::kBackward, {c}, {}, 300);      // 3: B3
  testing::AddTimedOp(it, Phase::kBackward, {b}, {}, 100);      // 4: B2
  testing::AddTimedOp(it, Phase::kBackward, {a}, {}, 100);      // 5: B1
  const SimInput in = MakeSimInput(it, testing::NanosecondProfile(), 1000);
  Plan p = testing::PlanOf({testing::SwapOut(a, 1), testing::SwapIn(a, 2, 5)});
  p.blocks = {{0, 0, BlockMode::kSwap}, {1, 1, BlockMode::kKeep}, {2, 2, BlockMode::kKeep}};
  const SimResult r = Simulate(in, p, {.record_events = true});
  ASSERT_TRUE(r.feasible) << r.reason;
  const std::vector<Stage> stages = BuildStages(in, p, r);
  EXPECT_EQ(StageNotation(stages), "F1 -> F2 -> F3||S1out -> B3||S1in -> B2 -> B1");
  EXPECT_EQ(StageNotation(stages, 2), "F1 -> ... -> B1");
}

}  // namespace
}  // namespace karma::policy
