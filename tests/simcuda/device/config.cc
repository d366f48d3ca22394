// SIMCUDA_* parsing and the identity (name, compute capability, SMs) of each profiled GPU.
#include "device/config.h"

#include <cstring>

#include "ground/common/units.h"

namespace simcuda {

using karma::policy::HwProfile;

const DeviceIdentity& IdentityOf(const HwProfile& profile) {
  static const DeviceIdentity kV100{"Tesla V100-PCIE-16GB (simcuda)", 7, 0, 80, 6 << 20};
  static const DeviceIdentity kA100{"NVIDIA A100-PCIE-40GB (simcuda)", 8, 0, 108, 40 << 20};
  static const DeviceIdentity kH100{"NVIDIA H100 80GB HBM3 (simcuda)", 9, 0, 132, 50 << 20};
  static const DeviceIdentity kOther{"simcuda device", 8, 0, 100, 40 << 20};
  if (std::strncmp(profile.name, "v100", 4) == 0) return kV100;
  if (std::strncmp(profile.name, "a100", 4) == 0) return kA100;
  if (std::strncmp(profile.name, "h100", 4) == 0) return kH100;
  return kOther;
}

Config Config::ForProfile(const HwProfile& profile) {
  Config c;
  c.profile = profile;
  c.capacity_bytes = profile.memory_bytes;
  return c;
}

Config ConfigFromEnvironment(EnvGetter get, std::vector<std::string>* problems) {
  Config c;
  if (const char* gpu = get("SIMCUDA_GPU"); gpu != nullptr && *gpu != '\0') {
    auto p = karma::policy::FindProfile(gpu);
    if (p.ok()) c = Config::ForProfile(*p);
    else problems->push_back("SIMCUDA_GPU: " + p.status().message() + "; using " + c.profile.name);
  }
  if (const char* mem = get("SIMCUDA_MEM"); mem != nullptr && *mem != '\0') {
    auto b = karma::ParseBytes(mem);
    if (b.ok() && *b > 0) {
      c.capacity_bytes = *b;
    } else {
      problems->push_back(std::string("SIMCUDA_MEM='") + mem + "' is not a positive byte count (" +
                          karma::kBytesForms + "); using the profile's " +
                          karma::FormatBytes(c.capacity_bytes));
    }
  }
  if (const char* ctx = get("SIMCUDA_CONTEXT_MEM"); ctx != nullptr && *ctx != '\0') {
    auto b = karma::ParseBytes(ctx);
    if (b.ok() && *b < c.capacity_bytes) {
      c.context_bytes = *b;
    } else {
      problems->push_back(std::string("SIMCUDA_CONTEXT_MEM='") + ctx + "' is not a byte count below the device's " +
                          karma::FormatBytes(c.capacity_bytes) + " (" + karma::kBytesForms + "); using 0");
    }
  }
  if (const char* link = get("SIMCUDA_LINK"); link != nullptr && *link != '\0') {
    auto rates = karma::policy::ParseLinkRates(link);
    if (rates.ok()) {
      c.profile.copy = c.profile.managed = {rates->first, rates->second};
      c.link_overridden = true;
    } else {
      problems->push_back("SIMCUDA_LINK: " + rates.status().message() + "; using the profile's");
    }
  }
  if (const char* stats = get("SIMCUDA_STATS"); stats != nullptr) c.stats_path = stats;
  if (const char* log = get("SIMCUDA_LOG"); log != nullptr && *log != '\0') {
    if (std::strcmp(log, "warn") == 0) c.log = LogLevel::kWarn;
    else if (std::strcmp(log, "info") == 0) c.log = LogLevel::kInfo;
    else if (std::strcmp(log, "debug") == 0) c.log = LogLevel::kDebug;
    else problems->push_back(std::string("SIMCUDA_LOG='") + log + "' is not one of warn|info|debug; using warn");
  }
  return c;
}

}  // namespace simcuda
