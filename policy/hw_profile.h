// Hardware profiles of GPUs and their host links, shared by the planner's cost model and simcuda.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "runtime/common/status.h"

namespace karma::policy {

struct HwProfile {
  const char* name;
  const char* description;
  uint64_t memory_bytes;        // device memory
  double flops_per_s;           // fp32 compute rate F of the roofline
  double memory_bw;             // device memory bandwidth B (bytes/s)
  double h2d_bw;                // host-to-device copy engine (bytes/s), pinned/prefetch rate
  double d2h_bw;                // device-to-host copy engine (bytes/s)
  double fault_latency_s;       // fixed cost of one managed-memory fault batch (2 MiB page group)
  double fault_bw;              // effective migration bandwidth of fault-driven paging (bytes/s)
  double kernel_launch_s;       // per-kernel fixed overhead
};

// Every profile; the first is the default (the paper's platform).
std::span<const HwProfile> AllProfiles();
const HwProfile& DefaultProfile();
// Looks a profile up by name; the error lists the known names.
Result<HwProfile> FindProfile(std::string_view name);
std::string ProfileNames();  // "a, b, c"

}  // namespace karma::policy
