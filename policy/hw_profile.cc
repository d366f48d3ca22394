// The profile table: datasheet rates, and what was measured on an H100 (docs/gpu-results.md). Every figure's source
// is in simcuda's calibration table (tests/simcuda/calibration.md).
#include "policy/hw_profile.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

namespace karma::policy {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

// Host time of calls: the per-range prefetch measured on an H100 in run 8 (64 calls of 2 MiB held the thread 1.0 ms
// in all); launches, event records, stream waits, a small pinned copy (for every call that enqueues work) and the
// virtual memory calls on an H200 in run 10 (move_costs); the rest assumptions. The same drivers and hosts stand
// behind every profile.
constexpr HostCosts kHostCosts{.launch_s = 4.4e-6,
                               .call_s = 2.1e-6,
                               .order_call_s = 0.33e-6,
                               .prefetch_call_s = 16e-6,
                               .device_chunks = {.create_s = 14e-6,
                                                 .map_s = 1.5e-6,
                                                 .set_access_s = 30e-6,
                                                 .set_access_more_s = 0.16e-6,
                                                 .unmap_s = 19e-6,
                                                 .release_s = 14e-6},
                               .host_chunks = {.create_s = 207e-6,
                                               .map_s = 4.4e-6,
                                               .set_access_s = 80e-6,
                                               .set_access_more_s = 18e-6,
                                               .unmap_s = 45e-6,
                                               .release_s = 46e-6}};

constexpr HwProfile kProfiles[] = {
    {.name = "v100-16g-pcie3",
     .description = "NVIDIA V100 16 GB on PCIe 3.0 x16 (the paper's platform)",
     .memory_bytes = 16 * kGiB,
     .flops_per_s = 14e12,
     .memory_bw = 900e9,
     .copy = {12e9, 12e9},
     .managed = {12e9, 12e9},
     .pageable_bw = 6e9,
     .fault_latency_s = 30e-6,
     .fault_bw = 4e9,
     .kernel_launch_s = 4e-6,
     .host = kHostCosts},
    {.name = "a100-40g-pcie4",
     .description = "NVIDIA A100 40 GB on PCIe 4.0 x16",
     .memory_bytes = 40 * kGiB,
     .flops_per_s = 19.5e12,
     .memory_bw = 1555e9,
     .copy = {24e9, 24e9},
     .managed = {24e9, 24e9},
     .pageable_bw = 8e9,
     .fault_latency_s = 25e-6,
     .fault_bw = 8e9,
     .kernel_launch_s = 4e-6,
     .host = kHostCosts},
    // The H100 SXM (80 GB HBM3) behind PCIe 5.0 x16. Managed memory as tests/gpu/um_costs.cu measured it on one
    // (driver 580.159.04, CUDA 13.0, 2026-11-26): batched prefetches of 2 MiB blocks to the device at 20-22 GB/s,
    // evictions to the host at 6.5-8.3 GB/s, a kernel faulting pages over at 7.9-11 GB/s. The copy engines at the
    // link's usable rate until tests/gpu/move_costs.cu measures them.
    {.name = "h100-80g",
     .description = "NVIDIA H100 80 GB SXM on PCIe 5.0 x16 (managed memory as measured on one)",
     .memory_bytes = 80 * kGiB,
     .flops_per_s = 67e12,
     .memory_bw = 3350e9,
     .copy = {50e9, 50e9},
     .managed = {20e9, 7e9},
     .pageable_bw = 10e9,
     .fault_latency_s = 20e-6,
     .fault_bw = 9e9,
     .kernel_launch_s = 3e-6,
     .host = kHostCosts},
};

// Names of earlier versions of the table: the profile they now are, with the moves they planned.
struct OlderName {
  const char* name;
  const char* profile;
  MovePath moves;
};
constexpr OlderName kOlderNames[] = {{"h100-80g-um", "h100-80g", MovePath::kManaged},
                                     {"h100-80g-pcie5", "h100-80g", MovePath::kCopy}};

}  // namespace

std::span<const HwProfile> AllProfiles() { return kProfiles; }
const HwProfile& DefaultProfile() { return kProfiles[0]; }

std::string ProfileNames() {
  std::string names;
  for (const HwProfile& p : kProfiles) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names;
}

Result<HwProfile> FindProfile(std::string_view name) {
  for (const HwProfile& p : kProfiles) {
    if (name == p.name) return p;
  }
  for (const OlderName& o : kOlderNames) {
    if (name != o.name) continue;
    HwProfile p = *FindProfile(o.profile);
    p.moves = o.moves;
    return p;
  }
  return InvalidArgument("unknown GPU profile '" + std::string(name) + "'; known profiles: " + ProfileNames());
}

namespace {

constexpr double kGB = 1e9;

// One positive rate in GB/s at the start of `text`, advanced past it.
bool TakeRate(std::string_view& text, double* bytes_per_s) {
  const std::string s(text);
  char* end = nullptr;
  const double gbps = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !(gbps > 0) || gbps > 1e4) return false;
  *bytes_per_s = gbps * kGB;
  text.remove_prefix(static_cast<size_t>(end - s.c_str()));
  return true;
}

}  // namespace

Result<std::pair<double, double>> ParseLinkRates(std::string_view text) {
  std::string_view t = text;
  double h2d = 0, d2h = 0;
  bool ok = TakeRate(t, &h2d);
  if (ok && !t.empty() && t.front() == '/') {
    t.remove_prefix(1);
    ok = TakeRate(t, &d2h);
  } else {
    d2h = h2d;
  }
  if (!ok || !t.empty()) {
    return InvalidArgument("'" + std::string(text) +
                           "' is not a link rate in GB/s: 12, or 12/6 for host-to-device/device-to-host");
  }
  return std::make_pair(h2d, d2h);
}

HwProfile WithLink(const HwProfile& profile, double h2d_bw, double d2h_bw) {
  HwProfile p = profile;
  LinkRates& link = p.moves == MovePath::kCopy ? p.copy : p.managed;
  if (h2d_bw > 0) link.h2d_bw = h2d_bw;
  if (d2h_bw > 0) link.d2h_bw = d2h_bw;
  return p;
}

double RoundedRate(double bytes_per_s) {
  if (!(bytes_per_s > 0)) return 0;
  return std::stod(fmt::format("{:.2g}", bytes_per_s / kGB)) * kGB;
}

std::string ProfileLabel(const HwProfile& profile) {
  auto named = FindProfile(profile.name);
  if (named.ok() && named->h2d_bw() == profile.h2d_bw() && named->d2h_bw() == profile.d2h_bw()) return profile.name;
  return fmt::format("{} link {}/{} GB/s", profile.name, profile.h2d_bw() / kGB, profile.d2h_bw() / kGB);
}

bool ProfileFromLabel(const HwProfile& base, const std::string& label, HwProfile* out) {
  const std::string prefix = fmt::format("{} link ", base.name);
  const std::string suffix = " GB/s";
  if (label.size() <= prefix.size() + suffix.size() || label.compare(0, prefix.size(), prefix) != 0 ||
      label.compare(label.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string_view rates(label.data() + prefix.size(), label.size() - prefix.size() - suffix.size());
  auto r = ParseLinkRates(rates);
  if (!r.ok() || rates.find('/') == std::string_view::npos) return false;
  *out = WithLink(base, r->first, r->second);
  return ProfileLabel(*out) == label;
}

}  // namespace karma::policy
