// Planner II on the shared workloads at memory pressure k = 2, 3, 4: the plan --solver ilp returns is valid and
// never slower in simulation than the heuristic plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "policy/checker.h"
#include "policy/strategies.h"
#include "solver/planner.h"
#include "tests/planner/planner_test_util.h"

namespace karma::solver {
namespace {

class Workload : public ::testing::TestWithParam<const char*> {};

TEST_P(Workload, IlpPlanIsNeverWorseThanTheHeuristicPlan) {
  const trace::Iteration it = testing::LoadOrDie(testing::WorkloadPath(std::string("workloads/") + GetParam()));
#ifdef __SANITIZE_ADDRESS__
  // Sanitized builds plan 5-20x slower: one pressure per workload covers the same code.
  const std::vector<double> ks = {2.0};
#else
  const std::vector<double> ks = {2.0, 3.0, 4.0};
#endif
  for (double k : ks) {
    SCOPED_TRACE(::testing::Message() << GetParam() << " k=" << k);
    const policy::SimInput in = policy::MakeSimInput(
        it, policy::DefaultProfile(), static_cast<uint64_t>(static_cast<double>(testing::IdealPeak(it)) / k));
    const auto start = std::chrono::steady_clock::now();
    const Result<policy::Plan> heuristic = policy::PlanKarma(in);
    const double heuristic_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(heuristic.ok()) << heuristic.status().message();
    const policy::SimResult h = policy::Simulate(in, *heuristic);
    ASSERT_TRUE(h.feasible) << h.reason;

    SolverOptions o;
    o.progress = nullptr;
    // The limit covers the heuristic too: leave GLPK time after it however slow this build is (sanitizers).
    o.time_limit_s = std::max(o.time_limit_s, 3 * heuristic_wall_s);
    SolveReport r;
    const Result<policy::Plan> ilp = PlanKarma(in, o, &r);
    ASSERT_TRUE(ilp.ok()) << ilp.status().message();
    const policy::SimResult s = policy::Simulate(in, *ilp, {.record_events = true});
    ASSERT_TRUE(s.feasible) << s.reason;
    const Status check = policy::CheckSchedule(in, *ilp, s);
    EXPECT_TRUE(check.ok()) << check.message();
    EXPECT_LE(s.iteration_s, h.iteration_s * (1 + 1e-12)) << r.Summary();
    EXPECT_NEAR(r.heuristic_s, h.iteration_s, 1e-12);
    // GLPK ran and gave solutions (the heuristic plan is not there by default).
    EXPECT_GT(r.optimal + r.feasible, 0) << r.Summary();
  }
}

INSTANTIATE_TEST_SUITE_P(Solver, Workload,
                         ::testing::Values("resnet50-b128.json", "vgg16-b64.json", "gpt2small-b8-s1024.json"));

}  // namespace
}  // namespace karma::solver
