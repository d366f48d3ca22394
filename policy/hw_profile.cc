// The profile table. Figures are datasheet rates; fault figures follow measured UVM behaviour, where
// fault-driven migration reaches a fraction of the prefetch bandwidth and each fault group pays tens of µs.
#include "policy/hw_profile.h"

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

}  // namespace karma::policy
