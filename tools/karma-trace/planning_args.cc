// Resolving a planning command's file, profile and capacity (bytes, a fraction, or a pressure factor).
#include "tools/karma-trace/planning_args.h"

#include <fmt/format.h>

#include "policy/hw_profile.h"
#include "runtime/common/units.h"
#include "runtime/trace/analysis.h"
#include "tools/karma-trace/commands.h"

namespace karma::tools {

void AddPlanningOptions(CLI::App* sub, PlanningArgs* args) {
  sub->add_option("FILE", args->file, "a .ktrace or karma-graph JSON file")->required();
  sub->add_option("--gpu", args->gpu, "hardware profile: " + policy::ProfileNames())->capture_default_str();
  CLI::Option* capacity = sub->add_option("--capacity", args->capacity,
                  "device bytes for tensors: plain bytes (5705000000), a unit (5.3GiB), or a fraction of the "
                  "profile's memory (0.5); default: the profile's memory");
  sub->add_option("--pressure", args->pressure,
                  "memory pressure K instead of --capacity: capacity = ideal in-core peak / K (K = 2: the "
                  "iteration needs twice the memory)")
      ->check(CLI::PositiveNumber)
      ->excludes(capacity);
}

std::unique_ptr<PlanningInput> ResolvePlanningInput(const PlanningArgs& args) {
  auto hw = policy::FindProfile(args.gpu);
  if (!hw.ok()) {
    Fail(hw.status().WithContext("--gpu"));
    return nullptr;
  }
  auto p = std::make_unique<PlanningInput>();
  if (!LoadOrReport(args.file, &p->it)) return nullptr;
  p->ideal_peak = trace::IdealMemory(p->it, trace::ComputeLifetimes(p->it)).peak_bytes;
  uint64_t capacity = hw->memory_bytes;
  if (!args.capacity.empty()) {
    auto c = ParseCapacity(args.capacity);
    if (!c.ok()) {
      Fail(c.status().WithContext("--capacity"));
      return nullptr;
    }
    capacity = c->Resolve(hw->memory_bytes);
  } else if (args.pressure > 0) {
    capacity = static_cast<uint64_t>(static_cast<double>(p->ideal_peak) / args.pressure);
  }
  p->in = policy::MakeSimInput(p->it, *hw, capacity);
  return p;
}

}  // namespace karma::tools
