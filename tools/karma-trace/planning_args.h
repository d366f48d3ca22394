// The options every planning command shares (--gpu, --link, --capacity, --pressure) and the input they resolve to.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "policy/simulator.h"
#include "policy/strategies.h"
#include "solver/plan_cache.h"
#include "solver/planner.h"
#include "ground/trace/model.h"

namespace karma::tools {

struct PlanningArgs {
  std::string file;
  std::string gpu = "v100-16g-pcie3";
  std::string link;      // "H2D/D2H" GB/s in place of the profile's host link; empty: the profile's
  std::string capacity;  // bytes, units, or a fraction of the profile's memory
  double pressure = 0;   // > 0: capacity = ideal in-core peak / pressure
  std::string solver = "ilp";         // how karma plans: heuristic or ilp (Planner II)
  double solver_time_limit_s = 6;     // wall clock for one karma plan with --solver ilp
  std::string plan_cache;             // directory, "off", or empty: solver::DefaultPlanCacheDir()
};
void AddPlanningOptions(CLI::App* sub, PlanningArgs* args);

// The loaded iteration and the simulation input it gives; kept together so the input's pointer stays valid.
struct PlanningInput {
  trace::Iteration it;
  policy::SimInput in;
  uint64_t ideal_peak = 0;
};
// Loads the file and resolves profile and capacity; prints the error and returns null on failure.
std::unique_ptr<PlanningInput> ResolvePlanningInput(const PlanningArgs& args);

// What planning karma did (Planner II, the plan cache), for the commands' output.
struct KarmaPlanning {
  bool ran = false;  // karma was planned or loaded
  solver::SolveReport report;
  solver::CacheOutcome cache;
};
// Plans (or pages, for um) and simulates one strategy; karma through Planner II and the plan cache.
policy::Evaluation EvaluateStrategy(const PlanningArgs& args, const policy::SimInput& in, std::string_view strategy,
                                    const policy::SimOptions& sim, KarmaPlanning* karma);
// "solver ..." and "plan cache ..." lines (nothing when karma did not run), and the same as JSON.
void PrintKarmaPlanning(const KarmaPlanning& k);
nlohmann::json KarmaPlanningJson(const KarmaPlanning& k);

}  // namespace karma::tools
