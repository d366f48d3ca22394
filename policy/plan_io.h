// Plans as JSON files ("karma-plan", versioned): what the runtime loads (KARMA_PLAN) and Planner II caches.
#pragma once

#include <string>

#include "policy/plan.h"
#include "ground/common/status.h"

namespace karma::policy {

// The JSON text of a plan (format "karma-plan", version kPlanFormatVersion).
std::string PlanToJson(const Plan& plan, int indent = 1);
// Parses a plan; a newer version is refused with a message naming both versions.
Result<Plan> PlanFromJson(const std::string& text);

Status WritePlanFile(const std::string& path, const Plan& plan);
// Errors carry the path as context.
Result<Plan> ReadPlanFile(const std::string& path);

}  // namespace karma::policy
