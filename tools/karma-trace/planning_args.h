// The options every planning command shares (--gpu, --capacity, --pressure) and the input they resolve to.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "policy/simulator.h"
#include "runtime/trace/model.h"

namespace karma::tools {

struct PlanningArgs {
  std::string file;
  std::string gpu = "v100-16g-pcie3";
  std::string capacity;  // bytes, units, or a fraction of the profile's memory
  double pressure = 0;   // > 0: capacity = ideal in-core peak / pressure
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

}  // namespace karma::tools
