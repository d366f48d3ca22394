// The time of every op of an iteration on a hardware profile, with the per-layer formulas filling missing counts.
#pragma once

#include <cstdint>
#include <vector>

#include "policy/hw_profile.h"
#include "ground/trace/model.h"

namespace karma::policy {

// Seconds each op takes: its measured duration; else the roofline max(flops / F, bytes / B), where a missing
// FLOP count of a recognized layer kind comes from EstimateFlops.
std::vector<double> OpTimes(const trace::Iteration& it, const HwProfile& hw);
// The in-core iteration time: every op back to back, no capacity limit.
double IdealSeconds(const std::vector<double>& op_times);

// Granularity of fault-driven migration and eviction of managed memory: the UVM driver migrates 2 MiB regions.
inline constexpr uint64_t kManagedPageBytes = 2ull << 20;

// On-demand paging of managed memory, serialized with the kernel that faults: each 2 MiB page group faulted in
// pays the fault latency and moves at the fault-driven migration rate; each byte evicted to make room is
// written back at the device-to-host rate (the driver migrates evicted pages; it does not know they are dead).
double PagingSeconds(const HwProfile& hw, uint64_t fault_bytes, uint64_t evicted_bytes);

}  // namespace karma::policy
