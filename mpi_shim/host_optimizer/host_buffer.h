// Large host arrays for optimizer state and benchmarks: 2 MiB-aligned anonymous mappings with
// transparent huge pages requested, zeroed in parallel by the pool's workers (first touch).
#pragma once

#include <cstddef>

#include "mpi_shim/host_optimizer/thread_pool.h"
#include "ground/common/status.h"

namespace karma::hostopt {

class HostBuffer {
 public:
  HostBuffer() = default;
  // `pool` may be null: the caller's thread then touches every page.
  static Result<HostBuffer> Allocate(size_t bytes, ThreadPool* pool);
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;      // what was asked for
  size_t mapped_ = 0;    // rounded up to whole huge pages
};

// Bytes of memory the kernel reports as available for new allocations (MemAvailable), 0 when unknown.
size_t AvailableMemoryBytes();

}  // namespace karma::hostopt
