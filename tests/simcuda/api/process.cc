// Creation of the process-wide device from the environment, statistics at exit, and stub reporting.
#include "api/process.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

namespace simcuda {
namespace {

Device* g_device = nullptr;

void WriteStats() {
  if (g_device == nullptr || g_device->config().stats_path.empty()) return;
  const std::string& path = g_device->config().stats_path;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    fmt::print(stderr, "simcuda: cannot write statistics to {}\n", path);
    return;
  }
  const std::string json = g_device->StatsJson();
  std::fwrite(json.data(), 1, json.size(), f);
  std::fputc('\n', f);
  std::fclose(f);
}

Device* Create() {
  std::vector<std::string> problems;
  Config config =
      ConfigFromEnvironment([](const char* name) -> const char* { return std::getenv(name); }, &problems);
  for (const std::string& p : problems) fmt::print(stderr, "simcuda: {}\n", p);
  // Never destroyed: programs call CUDA from their own exit handlers and static destructors.
  auto* device = new Device(std::move(config));
  if (!device->ok()) {
    fmt::print(stderr, "simcuda: cannot reserve the device address range; every CUDA call will fail\n");
    delete device;
    return nullptr;
  }
  g_device = device;
  std::atexit(WriteStats);
  return device;
}

}  // namespace

Device* Global() {
  static Device* device = Create();
  return device;
}

void WarnOnce(const char* message) {
  static std::mutex mu;
  static std::set<std::string>* seen = new std::set<std::string>;
  std::lock_guard lock(mu);
  if (seen->insert(message).second) fmt::print(stderr, "simcuda: {}\n", message);
}

}  // namespace simcuda

extern "C" int simcuda_unimplemented(const char* name, int code) {
  simcuda::WarnOnce(fmt::format("{} is not implemented (returns {})", name, code).c_str());
  return code;
}
