// The device's side of CUDA's virtual memory calls: the lock, the host time they cost (by where the chunks live, one
// call at a time: SpendVmm), device memory they hold.
#include <fmt/format.h>

#include <algorithm>

#include "device/device.h"
#include "device/device_internal.h"

namespace simcuda {
namespace {

double Chunks(uint64_t bytes) { return std::max<double>(1, static_cast<double>(bytes) / kVmmGranularity); }

}  // namespace

cudaError_t Device::AddressReserve(uintptr_t* ptr, size_t bytes, size_t alignment) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
  return vmm_.Reserve(bytes, alignment, ptr);
}

cudaError_t Device::AddressFree(uintptr_t ptr, size_t bytes) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
  return vmm_.Free(ptr, bytes);
}

cudaError_t Device::MemCreate(uint64_t* handle, size_t bytes, bool on_host, int location_type, int location_id) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  SpendVmm("create", on_host, bytes, Costs(on_host).create_s * Chunks(bytes));
  if (handle == nullptr || bytes == 0 || bytes % kVmmGranularity != 0) return cudaErrorInvalidValue;
  // A device chunk is device memory from now until it is gone, mapped or not; a host chunk is host memory.
  if (!on_host) SIMCUDA_RETURN_IF_ERROR(ChargeDevice(bytes));
  const cudaError_t e = vmm_.Create(bytes, on_host, location_type, location_id, handle);
  if (e != cudaSuccess && !on_host) {
    nonmanaged_bytes_ -= bytes;
    NoteUsage();
  }
  return e;
}

cudaError_t Device::MemRelease(uint64_t handle) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  if (const Chunk* c = vmm_.FindChunk(handle)) {
    SpendVmm("release", c->on_host, c->bytes, Costs(c->on_host).release_s * Chunks(c->bytes));
  }
  uint64_t freed = 0;
  SIMCUDA_RETURN_IF_ERROR(vmm_.Release(handle, &freed));
  nonmanaged_bytes_ -= freed;
  NoteUsage();
  return cudaSuccess;
}

cudaError_t Device::MemMap(uintptr_t ptr, size_t bytes, size_t offset, uint64_t handle) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  const Chunk* c = vmm_.FindChunk(handle);
  const bool host = c != nullptr && c->on_host;
  SpendVmm("map", host, bytes, Costs(host).map_s);
  return vmm_.Map(ptr, bytes, offset, handle);
}

cudaError_t Device::MemUnmap(uintptr_t ptr, size_t bytes) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  const Mapping* m = vmm_.FindMapping(ptr);
  const Chunk* c = m != nullptr ? vmm_.FindChunk(m->handle) : nullptr;
  const bool host = c != nullptr && c->on_host;
  SpendVmm("unmap", host, bytes, Costs(host).unmap_s);
  uint64_t freed = 0;
  double busy_until = 0;
  SIMCUDA_RETURN_IF_ERROR(vmm_.Unmap(ptr, bytes, &freed, &busy_until));
  nonmanaged_bytes_ -= freed;
  NoteUsage();
  // Unmapping is not stream-ordered: work still running on the range faults, and the context is lost.
  if (busy_until > clocks_.Now()) {
    Lose(cudaErrorIllegalAddress,
         fmt::format("{:#x} was unmapped at {:.9f} s while work on it runs until {:.9f} s: synchronize first", ptr,
                     clocks_.Now(), busy_until));
  }
  return cudaSuccess;
}

cudaError_t Device::MemSetAccess(uintptr_t ptr, size_t bytes, Access access) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  uint64_t on[2] = {0, 0};  // bytes mapped onto device chunks, onto host chunks
  for (uintptr_t a = ptr; a < ptr + bytes;) {
    const Mapping* m = vmm_.FindMapping(a);
    if (m == nullptr) break;  // the call fails below
    const Chunk* c = vmm_.FindChunk(m->handle);
    const uintptr_t end = std::min<uintptr_t>(m->base + m->bytes, ptr + bytes);
    on[c != nullptr && c->on_host] += end - a;
    a = end;
  }
  double cost = 0;
  for (bool host : {false, true}) {
    if (on[host] > 0) cost += Costs(host).set_access_s + (Chunks(on[host]) - 1) * Costs(host).set_access_more_s;
  }
  SpendVmm("access", on[true] > 0, bytes, cost > 0 ? cost : Costs(false).set_access_s);
  return vmm_.SetAccess(ptr, bytes, access);
}

cudaError_t Device::MemGetAccess(uintptr_t ptr, Access* access) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  return vmm_.GetAccess(ptr, access);
}

cudaError_t Device::MemRetain(uint64_t* handle, uintptr_t ptr) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
  return vmm_.Retain(ptr, handle);
}

bool Device::ChunkInfo(uint64_t handle, Chunk* out) {
  std::lock_guard lock(mu_);
  const Chunk* c = vmm_.FindChunk(handle);
  if (c == nullptr) return false;
  *out = *c;
  return true;
}

}  // namespace simcuda
