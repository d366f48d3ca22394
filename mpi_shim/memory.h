// Where the buffers the shim reads and writes on the host should be: the runtime's hooks, or a built-in that
// prefetches CUDA managed memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "include/karma/karma.h"

namespace karma::dp {

class MemoryMover {
 public:
  // enabled: KARMA_MPI_PREFETCH (the built-in); hooks installed later take precedence either way.
  explicit MemoryMover(bool enabled) : builtin_enabled_(enabled) {}

  void SetHooks(const karma_dp_memory_hooks* hooks);  // null: the built-in again
  void ToHost(const void* p, size_t bytes, int device) { Move(p, bytes, device, false); }
  void Sync();
  void ToDevice(const void* p, size_t bytes, int device) { Move(p, bytes, device, true); }
  uint64_t moved_bytes() const { return moved_.load(std::memory_order_relaxed); }

  // The device current on the calling thread (0 without a CUDA runtime in the process); the application
  // thread records it with each call, since the shim's threads have their own current device.
  int CurrentDevice();

 private:
  struct Cuda;
  bool Builtin();  // the CUDA runtime is loaded and prefetching is enabled; resolves it on first use
  void Move(const void* p, size_t bytes, int device, bool to_device);
  void Prefetch(const void* p, size_t bytes, bool to_device, int device);

  const bool builtin_enabled_;
  std::mutex mu_;
  karma_dp_memory_hooks hooks_{};
  bool have_hooks_ = false;
  Cuda* cuda_ = nullptr;  // resolved once, never freed (process lifetime)
  bool cuda_tried_ = false;
  std::atomic<uint64_t> moved_{0};
};

}  // namespace karma::dp
