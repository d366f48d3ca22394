// The profile table. Figures are datasheet rates; fault figures follow measured UVM behaviour, where
// fault-driven migration reaches a fraction of the prefetch bandwidth and each fault group pays tens of µs.
#include "policy/hw_profile.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

namespace karma::policy {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

constexpr HwProfile kProfiles[] = {
    {"v100-16g-pcie3", "NVIDIA V100 16 GB on PCIe 3.0 x16 (the paper's platform)", 16 * kGiB, 14e12, 900e9, 12e9,
     12e9, 30e-6, 4e9, 4e-6},
    {"a100-40g-pcie4", "NVIDIA A100 40 GB on PCIe 4.0 x16", 40 * kGiB, 19.5e12, 1555e9, 24e9, 24e9, 25e-6, 8e9,
     4e-6},
    {"h100-80g-pcie5", "NVIDIA H100 80 GB on PCIe 5.0 x16", 80 * kGiB, 51e12, 3350e9, 50e9, 50e9, 20e-6, 16e9,
     3e-6},
    // The same GPU with the rates managed memory gets over its host link, as measured on an H100 80GB HBM3
    // (driver 580.159.04, CUDA 13.0) by tests/gpu/um_costs.cu on 2026-11-26: batched prefetches of 64 2 MiB
    // blocks to the device at 20-22 GB/s, to the host (evictions) at 6.5-8.3 GB/s, a kernel faulting them over at
    // 7.9-11 GB/s (docs/gpu-results.md). libkarma.so plans with these on an H100 or H200: its moves are those.
    {"h100-80g-um", "NVIDIA H100 80 GB, managed-memory migration rates measured on an H100 SXM", 80 * kGiB, 51e12,
     3350e9, 20e9, 7e9, 20e-6, 9e9, 3e-6},
};

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
  if (h2d_bw > 0) p.h2d_bw = h2d_bw;
  if (d2h_bw > 0) p.d2h_bw = d2h_bw;
  return p;
}

double RoundedRate(double bytes_per_s) {
  if (!(bytes_per_s > 0)) return 0;
  return std::stod(fmt::format("{:.2g}", bytes_per_s / kGB)) * kGB;
}

std::string ProfileLabel(const HwProfile& profile) {
  auto named = FindProfile(profile.name);
  if (named.ok() && named->h2d_bw == profile.h2d_bw && named->d2h_bw == profile.d2h_bw) return profile.name;
  return fmt::format("{} link {}/{} GB/s", profile.name, profile.h2d_bw / kGB, profile.d2h_bw / kGB);
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
