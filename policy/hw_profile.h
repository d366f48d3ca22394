// Hardware profiles of GPUs and their host links, shared by the planner's cost model and simcuda.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

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

// Host links other than a profile's: rates measured on the machine (libkarma.so times the plan's moves), or given
// (karma-trace --link, simcuda's SIMCUDA_LINK).
// "H2D/D2H" or one figure for both, in GB/s (decimal): {h2d_bw, d2h_bw} in bytes/s.
Result<std::pair<double, double>> ParseLinkRates(std::string_view text);
// The profile with its host-to-device and device-to-host rates replaced where given (> 0).
HwProfile WithLink(const HwProfile& profile, double h2d_bw, double d2h_bw);
// A measured rate rounded to two significant digits (of GB/s), so that a machine measuring a little differently
// makes the same plan keys; 0 stays 0.
double RoundedRate(double bytes_per_s);
// How plan keys, plan caches and plan files name a profile: its name, followed by " link H/D GB/s" where its link
// rates are not those of the profile of that name.
std::string ProfileLabel(const HwProfile& profile);
// The profile a label names when it is `base` with other link rates (ProfileLabel of a WithLink profile); false
// when the label is not of that form.
bool ProfileFromLabel(const HwProfile& base, const std::string& label, HwProfile* out);

// Every profile; the first is the default (the paper's platform).
std::span<const HwProfile> AllProfiles();
const HwProfile& DefaultProfile();
// Looks a profile up by name; the error lists the known names.
Result<HwProfile> FindProfile(std::string_view name);
std::string ProfileNames();  // "a, b, c"

}  // namespace karma::policy
