// The out-of-core strategies: (iteration, profile, capacity) -> plan, and their simulated evaluation.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "policy/plan.h"
#include "policy/simulator.h"

namespace karma::policy {

struct StrategyInfo {
  const char* name;
  const char* summary;
  bool has_plan;  // false for um: the driver pages on demand
  bool managed;   // runs over managed memory: an op larger than the capacity still runs, paged
};
// incore, um, vdnn, superneurons, checkpoint, capacity, karma: the order tables print them in.
std::span<const StrategyInfo> AllStrategies();
std::string StrategyNames();  // "incore, um, ..."
bool IsStrategy(std::string_view name);

// The plan a strategy makes for the input's iteration, profile and capacity; kInfeasible when it cannot
// plan within the capacity (the message says why), kInvalidArgument for an unknown name or for um.
Result<Plan> MakePlan(std::string_view strategy, const SimInput& in);

// The plan-based strategies; each cites the rule it implements where it is defined.
Result<Plan> PlanInCore(const SimInput& in);
Result<Plan> PlanVdnn(const SimInput& in);
Result<Plan> PlanSuperNeurons(const SimInput& in);
Result<Plan> PlanCheckpoint(const SimInput& in);
Result<Plan> PlanCapacity(const SimInput& in);
Result<Plan> PlanKarma(const SimInput& in);

struct Evaluation {
  std::string strategy;
  bool feasible = false;
  std::string reason;  // why not
  Plan plan;           // empty for um
  SimResult sim;
};
// Plans (or pages, for um) and simulates. A plan the simulator accepts is feasible.
Evaluation Evaluate(std::string_view strategy, const SimInput& in, const SimOptions& options = {});

// Simulates candidate plans and keeps the fastest feasible one (strategies that search use it).
struct Candidate {
  Plan plan;
  SimResult sim;
};
// Simulates `plan` and keeps it in `best` when better (or `best` is empty); returns whether it did.
bool KeepFaster(Candidate& best, Plan plan, const SimInput& in);
bool Better(const SimResult& a, const SimResult& b);  // feasible first, then faster, then fewer bytes moved

}  // namespace karma::policy
