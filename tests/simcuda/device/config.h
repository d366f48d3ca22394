// The simulated device's configuration: a GPU profile from policy/hw_profile, its memory size, where stats go.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/hw_profile.h"

namespace simcuda {

// What a real device reports about itself beyond the profile's performance figures.
struct DeviceIdentity {
  const char* device_name;  // cudaDeviceProp::name
  int cc_major;
  int cc_minor;
  int sm_count;
  int l2_bytes;
};
const DeviceIdentity& IdentityOf(const karma::policy::HwProfile& profile);

enum class LogLevel { kWarn = 0, kInfo = 1, kDebug = 2 };

struct Config {
  karma::policy::HwProfile profile = karma::policy::DefaultProfile();
  uint64_t capacity_bytes = karma::policy::DefaultProfile().memory_bytes;
  // SIMCUDA_CONTEXT_MEM: device memory in use from the start and never freed, as a GPU's context and libraries
  // hold it (cudaMemGetInfo counts it); less than capacity_bytes.
  uint64_t context_bytes = 0;
  // SIMCUDA_LINK: the host link's rates in GB/s ("H2D/D2H", or one figure for both) in place of the profile's,
  // for the copy engines and managed memory alike; the device keeps the profile's name, so a program plans with
  // the profile's figures (a link slower than its profile says).
  bool link_overridden = false;
  std::string stats_path;  // SIMCUDA_STATS: JSON statistics written at exit; empty: none
  LogLevel log = LogLevel::kWarn;

  // A profile by name with its own memory size.
  static Config ForProfile(const karma::policy::HwProfile& profile);
};

// Reads SIMCUDA_GPU, SIMCUDA_MEM, SIMCUDA_CONTEXT_MEM, SIMCUDA_LINK, SIMCUDA_STATS and SIMCUDA_LOG through `get`
// (getenv by default). A bad value adds a message to `problems` and the default is used.
using EnvGetter = const char* (*)(const char*);
Config ConfigFromEnvironment(EnvGetter get, std::vector<std::string>* problems);

}  // namespace simcuda
