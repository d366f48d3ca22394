// The session's device memory: the budget from the device, the residency chosen once, memory queries.
#include "runtime/session/device_memory.h"

#include <dlfcn.h>

#include <algorithm>

#include "ground/common/log.h"

namespace karma::rt {

DeviceMemory::DeviceMemory(const SessionConfig& config, const CudaApi& api, Executor& executor,
                           std::function<const CudaApi&()> driver_api)
    : config_(config),
      api_(api),
      executor_(executor),
      driver_api_(std::move(driver_api)),
      arena_(api_, Arena::Options{config_.arena_segment_bytes}) {}

void DeviceMemory::EnsureDeviceInfo() {
  std::call_once(device_info_once_, [this] {
    if (api_.cudaGetDevice != nullptr) {
      LastErrorScope errors(api_);
      int device = 0;
      if (api_.cudaGetDevice(&device) == cudaSuccess) device_.store(device, std::memory_order_relaxed);
      else errors.Failed();
    }
    size_t free = 0, total = 0;
    if (!RealMemGetInfo(api_, &free, &total)) return;
    device_baseline_bytes_.store(total > free ? total - free : 0, std::memory_order_relaxed);
    stats_->device_total_bytes.store(total, std::memory_order_relaxed);
    const uint64_t budget = config_.capacity.Resolve(total, free);
    stats_->budget_bytes.store(budget, std::memory_order_relaxed);
    ChooseResidency(budget);
    if (budget > free) {
      KARMA_LOG(kWarn,
                "KARMA_CAPACITY {} is more than the {} free on the device ({} of {} held already, by this process's "
                "context and any other process): the driver will evict beyond the plan",
                FormatBytes(budget), FormatBytes(free), FormatBytes(total - std::min<uint64_t>(free, total)),
                FormatBytes(total));
    } else if (config_.capacity.is_fraction && free + total / 10 < total) {
      KARMA_LOG(kInfo, "budget {}: {} of the {} free on the device ({} in all)", FormatBytes(budget),
                config_.capacity.ToString(), FormatBytes(free), FormatBytes(total));
    }
  });
}

void DeviceMemory::ChooseResidency(uint64_t budget) {
  if (config_.residency == ResidencyChoice::kManaged || config_.mode == Mode::kUm) return;
  // libkarma_mpi.so reads and writes the application's buffers on host threads (reductions, host updates): the copy
  // path's memory is the device's alone.
  if (dlsym(RTLD_DEFAULT, "karma_dp_set_memory_hooks") != nullptr) {
    const bool asked = config_.residency == ResidencyChoice::kCopy;
    const LogLevel level = asked ? LogLevel::kWarn : LogLevel::kInfo;
    if (LogEnabled(level)) {
      LogMessage(level, fmt::format("KARMA_RESIDENCY={}: managed memory, since libkarma_mpi.so reads and writes the "
                                    "application's buffers on the host, which the copy path's device memory does not "
                                    "allow", asked ? "copy" : "auto"));
    }
    return;
  }
  auto r = CopyResidency::Create(driver_api_(), device(), budget);
  if (!r.ok()) {
    if (config_.residency == ResidencyChoice::kCopy) {
      // Not managed memory instead: a user asking for copy may have a device too short of memory to oversubscribe.
      copy_refused_ = "KARMA_RESIDENCY=copy is not available here (" + r.status().message() + ")";
    } else {
      KARMA_LOG(kInfo, "KARMA_RESIDENCY=auto: managed memory ({})", r.status().message());
    }
    return;
  }
  residency_ = std::move(r).value();
  CopyResidency* res = residency_.get();
  arena_.SetSegmentSource([res](uint64_t bytes) -> uint64_t {
    auto at = res->Reserve(bytes, /*on_device=*/false);  // blocks get device memory as they are allocated
    return at.ok() ? *at : 0;
  });
  arena_.SetPreference([res](uint64_t addr, uint64_t bytes) {
    const uint64_t g = res->granularity(), lo = addr / g * g;
    return res->Backed({lo, (addr + bytes + g - 1) / g * g - lo});
  });
  executor_.SetResidency(res);
  KARMA_LOG(kInfo, "residency: copy (device memory through the virtual memory API, a pool of at most {}, pinned host "
            "chunks for what is away)", FormatBytes(AlignDown(budget, res->granularity())));
}

void DeviceMemory::AdjustMemInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return;
  EnsureDeviceInfo();
  uint64_t budget = stats_->budget_bytes.load(std::memory_order_relaxed);
  if (budget == 0) budget = config_.capacity.Resolve(*total, *free);  // the device could not be asked before
  const uint64_t used = arena_.usage().live_bytes;
  const uint64_t left = budget > used ? budget - used : 0;
  *free = static_cast<size_t>(std::min<uint64_t>(*free, left));
}

}  // namespace karma::rt
