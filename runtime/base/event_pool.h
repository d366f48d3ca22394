// Events without timing, kept for reuse: what the arena's frees wait on, and the data-parallel hooks' moves. Not
// thread-safe: its owner's lock guards it.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "runtime/base/cuda_api.h"

namespace karma::rt {

class EventPool {
 public:
  explicit EventPool(const CudaApi& api) : api_(api) {}
  ~EventPool() {
    if (api_.cudaEventDestroy == nullptr) return;
    for (cudaEvent_t e : spare_) api_.cudaEventDestroy(e);
  }
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // A spare event, or a new one; null when none can be made (the application's last error is left as it was).
  cudaEvent_t Acquire() {
    if (!spare_.empty()) {
      cudaEvent_t e = spare_.back();
      spare_.pop_back();
      return e;
    }
    if (api_.cudaEventCreateWithFlags == nullptr) return nullptr;
    cudaEvent_t e = nullptr;
    LastErrorScope errors(api_);
    if (api_.cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      errors.Failed();
      return nullptr;
    }
    return e;
  }
  // Back for reuse; an event a call failed on (`healthy` false) is destroyed instead.
  void Release(cudaEvent_t e, bool healthy = true) {
    if (healthy) {
      spare_.push_back(e);
    } else if (api_.cudaEventDestroy != nullptr) {
      api_.cudaEventDestroy(e);
    }
  }

 private:
  const CudaApi& api_;
  std::vector<cudaEvent_t> spare_;
};

}  // namespace karma::rt
