// The device memory the session serves: the arena, the copy residency where it is chosen, and what the device held
// before the first allocation.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "ground/common/live_stats.h"
#include "runtime/base/config.h"
#include "runtime/base/cuda_api.h"
#include "runtime/replay/executor.h"
#include "runtime/residency/arena.h"
#include "runtime/residency/copy_residency.h"

namespace karma::rt {

class DeviceMemory {
 public:
  // `driver_api`: the table with the driver's late entries resolved (Session::ApiFor), for the copy residency.
  DeviceMemory(const SessionConfig& config, const CudaApi& api, Executor& executor,
               std::function<const CudaApi&()> driver_api);
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void SetStats(live::Stats* stats) { stats_ = stats; }

  // Once, at the first allocation (or plan, or memory query): the device's memory, the budget, the residency.
  void EnsureDeviceInfo();
  // free + used <= budget <= total, where used is what the application holds in the arena.
  void AdjustMemInfo(size_t* free, size_t* total);

  Arena& arena() { return arena_; }
  const Arena& arena() const { return arena_; }
  // The copy path; null: managed memory.
  CopyResidency* residency() const { return residency_.get(); }
  // Why KARMA_RESIDENCY=copy was asked for and could not be had (then no allocation is served); empty otherwise.
  const std::string& copy_refused() const { return copy_refused_; }
  // The device the arena serves (current at the first allocation, memory query or plan).
  int device() const { return device_.load(std::memory_order_relaxed); }
  // Device memory in use (cudaMemGetInfo) when the first allocation came: the context and the libraries.
  uint64_t baseline_bytes() const { return device_baseline_bytes_.load(std::memory_order_relaxed); }

 private:
  // The copy residency where KARMA_RESIDENCY asks for it and the device supports it (once, with the budget).
  void ChooseResidency(uint64_t budget);

  const SessionConfig& config_;
  const CudaApi& api_;
  Executor& executor_;
  const std::function<const CudaApi&()> driver_api_;
  live::Stats* stats_ = nullptr;
  std::string copy_refused_;
  std::unique_ptr<CopyResidency> residency_;  // declared before the arena: outlives its users
  Arena arena_;
  std::once_flag device_info_once_;
  std::atomic<uint64_t> device_baseline_bytes_{0};
  std::atomic<int> device_{0};
};

}  // namespace karma::rt
