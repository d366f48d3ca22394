// The time of every op of an iteration on a hardware profile, with the per-layer formulas filling missing counts.
#pragma once

#include <vector>

#include "policy/hw_profile.h"
#include "runtime/trace/model.h"

namespace karma::policy {

// Seconds each op takes: its measured duration; else the roofline max(flops / F, bytes / B), where a missing
// FLOP count of a recognized layer kind comes from EstimateFlops.
std::vector<double> OpTimes(const trace::Iteration& it, const HwProfile& hw);
// The in-core iteration time: every op back to back, no capacity limit.
double IdealSeconds(const std::vector<double>& op_times);

}  // namespace karma::policy
