// CUDA's virtual memory management on the simulated device: address reservations, physical chunks on the device
// or the host, chunks mapped onto reserved ranges, and the device's access to them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>

#include "device/address_space.h"

namespace simcuda {

// What cuMemGetAllocationGranularity reports, minimum and recommended alike, device and host chunks alike.
inline constexpr uint64_t kVmmGranularity = 2ull << 20;

enum class Access : uint8_t { kNone, kRead, kReadWrite };

// A cuMemCreate allocation. Its bytes live in a memory file, so that each mapping of it (any number, at any
// reserved address) shows the same bytes.
struct Chunk {
  uint64_t bytes = 0;
  bool on_host = false;
  int location_type = 0;  // CUmemLocationType, as created
  int location_id = 0;
  int fd = -1;
  int references = 1;  // the handle: cuMemCreate, + cuMemRetainAllocationHandle, - cuMemRelease
  int mappings = 0;
};

struct Mapping {
  uintptr_t base = 0;
  uint64_t bytes = 0;
  uint64_t handle = 0;
  Access access = Access::kNone;  // the device's: a new mapping has none until cuMemSetAccess
  double busy_until = 0;           // when the last operation that touched it ends (virtual seconds)
};

// How an operation's range falls on the virtual memory: outside every reservation, on mappings the device may
// access (of device or host chunks), or on a reserved address without a mapping or without access.
struct VmmSpan {
  bool illegal = false;
  uint64_t device_bytes = 0;
  uint64_t host_bytes = 0;
  bool Any() const { return illegal || device_bytes + host_bytes > 0; }
};

// The bookkeeping and the host mappings behind the driver's calls; the device's lock guards it, and the device
// charges capacity and time. Each call checks its arguments as the driver documents and returns the runtime
// error matching the driver's (cudaErrorInvalidValue for CUDA_ERROR_INVALID_VALUE).
class VirtualMemory {
 public:
  explicit VirtualMemory(AddressSpace* space) : space_(space) {}
  ~VirtualMemory();
  VirtualMemory(const VirtualMemory&) = delete;
  VirtualMemory& operator=(const VirtualMemory&) = delete;

  cudaError_t Reserve(uint64_t bytes, uint64_t alignment, uintptr_t* out);
  cudaError_t Free(uintptr_t base, uint64_t bytes);
  cudaError_t Create(uint64_t bytes, bool on_host, int location_type, int location_id, uint64_t* handle);
  // Drops one reference; `freed_device_bytes` gets the device bytes given back when the chunk goes with it.
  cudaError_t Release(uint64_t handle, uint64_t* freed_device_bytes);
  cudaError_t Map(uintptr_t base, uint64_t bytes, uint64_t offset, uint64_t handle);
  // Unmaps whole mappings; `busy_until` gets when the last operation on them ends.
  cudaError_t Unmap(uintptr_t base, uint64_t bytes, uint64_t* freed_device_bytes, double* busy_until);
  cudaError_t SetAccess(uintptr_t base, uint64_t bytes, Access access);
  cudaError_t GetAccess(uintptr_t addr, Access* access) const;
  cudaError_t Retain(uintptr_t addr, uint64_t* handle);
  const Chunk* FindChunk(uint64_t handle) const;  // a live handle's chunk, else null
  const Mapping* FindMapping(uintptr_t addr) const;
  const Chunk& ChunkOf(const Mapping& m) const { return *chunks_.at(m.handle); }

  VmmSpan Classify(uintptr_t addr, uint64_t bytes) const;
  // Operations on [addr, addr + bytes) end at `end`.
  void MarkBusy(uintptr_t addr, uint64_t bytes, double end);

 private:
  // The mappings that cover [base, base + bytes) exactly, in order, or an empty map range when they do not.
  std::pair<std::map<uintptr_t, Mapping>::iterator, std::map<uintptr_t, Mapping>::iterator> Whole(uintptr_t base,
                                                                                                  uint64_t bytes);
  // The chunk goes when neither a handle nor a mapping refers to it any more.
  void Drop(uint64_t handle, uint64_t* freed_device_bytes);
  const std::pair<const uintptr_t, uint64_t>* ReservationOf(uintptr_t addr) const;

  AddressSpace* space_;
  std::map<uintptr_t, uint64_t> reservations_;  // base -> bytes
  std::map<uintptr_t, Mapping> mappings_;        // base -> mapping
  std::unordered_map<uint64_t, std::unique_ptr<Chunk>> chunks_;
  uint64_t next_handle_ = 1;
};

}  // namespace simcuda
