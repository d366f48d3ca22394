// The shim's pure parts: the MG-WFBP grouping on hand-computed schedules, the cost-model fit and parsing.
#include <gtest/gtest.h>

#include <vector>

#include "ground/exchange/cost_model.h"
#include "ground/exchange/merge_plan.h"
#include "mpi_shim/timeline.h"

namespace karma::dp {
namespace {

constexpr double kMs = 1e-3;
constexpr uint64_t kNoCap = uint64_t{1} << 40;

PlanCall Call(uint64_t bytes, double ready_ms, uint64_t merge_class = 0, bool ends = false) {
  return PlanCall{bytes, ready_ms * kMs, merge_class, ends};
}

std::vector<std::pair<int, int>> Spans(const std::vector<GroupSpan>& groups) {
  std::vector<std::pair<int, int>> out;
  for (const GroupSpan& g : groups) out.push_back({g.first, g.last});
  return out;
}

// alpha 1 ms, 1 ns per byte (1 GB/s).
const CostModel kModel{1 * kMs, 1e-9};

TEST(MergePlan, MergesWhenWaitingCostsLessThanAStartUp) {
  // Call 1 is ready 0.5 ms after call 0's allreduce could start: waiting (0.5 ms) < alpha (1 ms): merged. The
  // group [0, 1] starts at 0.5 ms and ends 1 ms + 2000 ns later. Call 2 comes 4.5 ms after that start: alone.
  const std::vector<PlanCall> calls = {Call(1000, 0), Call(1000, 0.5), Call(1000000, 5)};
  const auto groups = PlanGroups(calls, kModel, kNoCap);
  ASSERT_EQ(Spans(groups), (std::vector<std::pair<int, int>>{{0, 1}, {2, 2}}));
  EXPECT_DOUBLE_EQ(groups[0].start_s, 0.5 * kMs);
  EXPECT_DOUBLE_EQ(groups[0].end_s, 0.5 * kMs + 1 * kMs + 2000e-9);
  EXPECT_EQ(groups[0].bytes, 2000u);
  EXPECT_DOUBLE_EQ(groups[1].start_s, 5 * kMs);
  EXPECT_DOUBLE_EQ(groups[1].end_s, 5 * kMs + 1 * kMs + 1 * kMs);
}

TEST(MergePlan, KeepsApartWhatWouldWaitLongerThanAStartUp) {
  // 1.5 ms apart each, the link idle: every call alone (plain wait-free backpropagation).
  const std::vector<PlanCall> calls = {Call(100, 0), Call(100, 1.5), Call(100, 3)};
  EXPECT_EQ(Spans(PlanGroups(calls, kModel, kNoCap)), (std::vector<std::pair<int, int>>{{0, 0}, {1, 1}, {2, 2}}));
}

TEST(MergePlan, MergesWhatWouldQueueBehindABusyLink) {
  // Call 0 (10 MB) occupies the link until 11 ms. Calls 1 and 2 arrive at 2 and 3 ms: the group starting with
  // call 1 cannot start before 11 ms, so call 2 is already there (3 - 11 < alpha) and merges at no cost.
  const std::vector<PlanCall> calls = {Call(10000000, 0), Call(100, 2), Call(100, 3)};
  const auto groups = PlanGroups(calls, kModel, kNoCap);
  ASSERT_EQ(Spans(groups), (std::vector<std::pair<int, int>>{{0, 0}, {1, 2}}));
  EXPECT_DOUBLE_EQ(groups[0].end_s, 11 * kMs);
  EXPECT_DOUBLE_EQ(groups[1].start_s, 11 * kMs);
  EXPECT_DOUBLE_EQ(groups[1].end_s, 11 * kMs + 1 * kMs + 200e-9);
}

TEST(MergePlan, TheMergedScheduleBeatsCallByCallWhereItMerges) {
  // Twenty tiny gradients 0.1 ms apart: merged, one start-up is paid instead of twenty.
  std::vector<PlanCall> calls;
  std::vector<int> singles;
  for (int i = 0; i < 20; ++i) {
    calls.push_back(Call(64, 0.1 * i));
    singles.push_back(i);
  }
  const auto merged = PlanGroups(calls, kModel, kNoCap);
  const auto wfbp = ScheduleGroups(calls, singles, kModel);
  EXPECT_EQ(merged.size(), 1u);
  EXPECT_DOUBLE_EQ(merged.back().end_s, 1.9 * kMs + 1 * kMs + 1280e-9);
  EXPECT_DOUBLE_EQ(wfbp.back().end_s, 20 * (1 * kMs + 64e-9));  // back to back from 0
  EXPECT_LT(merged.back().end_s, wfbp.back().end_s);
}

TEST(MergePlan, NeverMergesAcrossClassesBlockingCallsOrTheCap) {
  std::vector<PlanCall> calls = {Call(100, 0, 0), Call(100, 0, 1), Call(100, 0, 1, true), Call(100, 0, 1)};
  EXPECT_EQ(Spans(PlanGroups(calls, kModel, kNoCap)), (std::vector<std::pair<int, int>>{{0, 0}, {1, 2}, {3, 3}}));
  calls = {Call(100, 0), Call(100, 0), Call(100, 0)};
  EXPECT_EQ(Spans(PlanGroups(calls, kModel, 200)), (std::vector<std::pair<int, int>>{{0, 1}, {2, 2}}));
  // A single call above the cap still goes, alone.
  calls = {Call(1000, 0), Call(100, 0)};
  EXPECT_EQ(Spans(PlanGroups(calls, kModel, 500)), (std::vector<std::pair<int, int>>{{0, 0}, {1, 1}}));
}

TEST(MergePlan, WithoutStartUpCostOnlyWhatIsAlreadyWaitingMerges) {
  const CostModel free_startup{0, 1e-9};
  // Call 1 arrives while call 0's 1 MB allreduce (1 ms) runs: the group starting with it waits for the link
  // anyway, and call 2 is then there as well.
  const std::vector<PlanCall> calls = {Call(1000000, 0), Call(100, 0.5), Call(100, 0.6), Call(100, 5)};
  EXPECT_EQ(Spans(PlanGroups(calls, free_startup, kNoCap)),
            (std::vector<std::pair<int, int>>{{0, 0}, {1, 2}, {3, 3}}));
}

TEST(MergePlan, EmptyAndSingle) {
  EXPECT_TRUE(PlanGroups({}, kModel, kNoCap).empty());
  const std::vector<PlanCall> one = {Call(8, 2)};
  const auto groups = PlanGroups(one, kModel, kNoCap);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_DOUBLE_EQ(groups[0].start_s, 2 * kMs);
}

TEST(CostModel, FitRecoversALine) {
  const std::vector<CostSample> samples = {{4, 20e-6 + 4e-10}, {1 << 20, 20e-6 + (1 << 20) * 1e-10},
                                           {4 << 20, 20e-6 + (4 << 20) * 1e-10}};
  auto m = FitCostModel(samples);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_NEAR(m->alpha_s, 20e-6, 1e-12);
  EXPECT_NEAR(m->beta_s_per_byte, 1e-10, 1e-18);
  EXPECT_NEAR(m->Time(1000), 20e-6 + 1e-7, 1e-12);
}

TEST(CostModel, FitWeighsRelativeErrors) {
  // Small sizes at 20 us, large ones superlinear (caches): the start-up stays near the small sizes' time
  // instead of being pulled below zero by the large transfers, as an unweighted fit would do.
  const std::vector<CostSample> samples = {{4, 20e-6}, {16 << 10, 22e-6}, {256 << 10, 100e-6}, {2 << 20, 2e-3}};
  auto m = FitCostModel(samples);
  ASSERT_TRUE(m.ok());
  EXPECT_GT(m->alpha_s, 10e-6);
  EXPECT_LT(m->alpha_s, 25e-6);
  EXPECT_GT(m->beta_s_per_byte, 0);
}

TEST(CostModel, FitClampsNoiseAndNeedsTwoSizes) {
  // Decreasing times (noise): no bandwidth term; the constant that minimizes the relative error,
  // sum(1/t) / sum(1/t^2) = 1.2e-5 here.
  auto m = FitCostModel(std::vector<CostSample>{{4, 3e-5}, {1 << 20, 1e-5}});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->beta_s_per_byte, 0);
  EXPECT_NEAR(m->alpha_s, 1.2e-5, 1e-12);
  // Through the origin's far side: the intercept would be negative; the best line through 0 instead.
  m = FitCostModel(std::vector<CostSample>{{1000, 1e-6}, {2000, 3e-6}});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->alpha_s, 0);
  EXPECT_GT(m->beta_s_per_byte, 1e-9);
  EXPECT_LT(m->beta_s_per_byte, 1.5e-9);
  EXPECT_FALSE(FitCostModel(std::vector<CostSample>{{64, 1e-5}, {64, 2e-5}}).ok());
  EXPECT_FALSE(FitCostModel(std::vector<CostSample>{{64, 1e-5}, {128, 0}}).ok());
  EXPECT_FALSE(FitCostModel({}).ok());
}

TEST(CostModel, Parse) {
  auto m = ParseCostModel("20,5");
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(m->alpha_s, 20e-6);
  EXPECT_DOUBLE_EQ(m->beta_s_per_byte, 0.2e-9);
  EXPECT_TRUE(ParseCostModel(" 0 , 12.5 ").ok());
  for (const char* bad : {"", "20", "20,", ",5", "a,5", "20,0", "-1,5", "20,5,3", "20,inf"}) {
    EXPECT_FALSE(ParseCostModel(bad).ok()) << bad;
  }
  EXPECT_EQ(CostModel(20e-6, 0.2e-9).ToString(), "alpha 20.0 us, 5 GB/s");
}

TEST(Timeline, PathPattern) {
  EXPECT_EQ(TimelinePath("/tmp/t-%r.json", 3), "/tmp/t-3.json");
  EXPECT_EQ(TimelinePath("plain.json", 1), "plain.json");
  EXPECT_EQ(TimelinePath("%r/%r%", 12), "12/12%");
}

}  // namespace
}  // namespace karma::dp
