// Reservations, chunks and mappings of CUDA's virtual memory API, kept as the driver documents them.
#include "device/vmm.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace simcuda {
namespace {

bool Aligned(uint64_t v) { return v % kVmmGranularity == 0; }

int Protection(Access a) {
  switch (a) {
    case Access::kNone: return PROT_NONE;
    case Access::kRead: return PROT_READ;
    case Access::kReadWrite: return PROT_READ | PROT_WRITE;
  }
  return PROT_NONE;
}

// An unmapped reserved range goes back to what the reservation was: inaccessible, holding nothing.
bool Placeholder(uintptr_t base, uint64_t bytes) {
  return mmap(reinterpret_cast<void*>(base), bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
              -1, 0) != MAP_FAILED;
}

}  // namespace

VirtualMemory::~VirtualMemory() {
  for (auto& [handle, c] : chunks_) close(c->fd);
}

const std::pair<const uintptr_t, uint64_t>* VirtualMemory::ReservationOf(uintptr_t addr) const {
  auto it = reservations_.upper_bound(addr);
  if (it == reservations_.begin()) return nullptr;
  --it;
  return addr < it->first + it->second ? &*it : nullptr;
}

cudaError_t VirtualMemory::Reserve(uint64_t bytes, uint64_t alignment, uintptr_t* out) {
  if (out == nullptr || bytes == 0 || !Aligned(bytes) || (alignment & (alignment - 1)) != 0) {
    return cudaErrorInvalidValue;
  }
  const uintptr_t base = space_->Allocate(bytes, std::max(alignment, kVmmGranularity), /*accessible=*/false);
  if (base == 0) return cudaErrorMemoryAllocation;
  reservations_[base] = bytes;
  *out = base;
  return cudaSuccess;
}

cudaError_t VirtualMemory::Free(uintptr_t base, uint64_t bytes) {
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second != bytes) return cudaErrorInvalidValue;
  // The driver documents no answer for a reservation that still has mappings; refusing it keeps them valid.
  auto m = mappings_.lower_bound(base);
  if (m != mappings_.end() && m->first < base + bytes) return cudaErrorInvalidValue;
  space_->Release(base, bytes);
  reservations_.erase(it);
  return cudaSuccess;
}

cudaError_t VirtualMemory::Create(uint64_t bytes, bool on_host, int location_type, int location_id,
                                  uint64_t* handle) {
  if (handle == nullptr || bytes == 0 || !Aligned(bytes)) return cudaErrorInvalidValue;
  auto c = std::make_unique<Chunk>();
  c->bytes = bytes;
  c->on_host = on_host;
  c->location_type = location_type;
  c->location_id = location_id;
  c->fd = memfd_create(on_host ? "simcuda-host-chunk" : "simcuda-device-chunk", MFD_CLOEXEC);
  if (c->fd < 0) return cudaErrorMemoryAllocation;
  if (ftruncate(c->fd, static_cast<off_t>(bytes)) != 0) {
    close(c->fd);
    return cudaErrorMemoryAllocation;
  }
  *handle = next_handle_++;
  chunks_[*handle] = std::move(c);
  return cudaSuccess;
}

void VirtualMemory::Drop(uint64_t handle, uint64_t* freed_device_bytes) {
  auto it = chunks_.find(handle);
  if (it == chunks_.end() || it->second->references > 0 || it->second->mappings > 0) return;
  if (!it->second->on_host) *freed_device_bytes += it->second->bytes;
  close(it->second->fd);
  chunks_.erase(it);
}

cudaError_t VirtualMemory::Release(uint64_t handle, uint64_t* freed_device_bytes) {
  auto it = chunks_.find(handle);
  if (it == chunks_.end() || it->second->references == 0) return cudaErrorInvalidValue;
  --it->second->references;
  Drop(handle, freed_device_bytes);
  return cudaSuccess;
}

cudaError_t VirtualMemory::Map(uintptr_t base, uint64_t bytes, uint64_t offset, uint64_t handle) {
  auto c = chunks_.find(handle);
  // The driver documents that the offset must currently be zero.
  if (c == chunks_.end() || c->second->references == 0 || bytes == 0 || !Aligned(base) || !Aligned(bytes) ||
      offset != 0 || bytes > c->second->bytes) {
    return cudaErrorInvalidValue;
  }
  const auto* r = ReservationOf(base);
  if (r == nullptr || base + bytes > r->first + r->second) return cudaErrorInvalidValue;
  // Only on a range that is not mapped yet.
  auto next = mappings_.lower_bound(base);
  if (next != mappings_.end() && next->first < base + bytes) return cudaErrorInvalidValue;
  if (next != mappings_.begin() && std::prev(next)->second.base + std::prev(next)->second.bytes > base) {
    return cudaErrorInvalidValue;
  }
  if (mmap(reinterpret_cast<void*>(base), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, c->second->fd, 0) == MAP_FAILED) {
    return cudaErrorMemoryAllocation;
  }
  ++c->second->mappings;
  mappings_[base] = Mapping{base, bytes, handle, Access::kNone, 0};
  return cudaSuccess;
}

std::pair<std::map<uintptr_t, Mapping>::iterator, std::map<uintptr_t, Mapping>::iterator> VirtualMemory::Whole(
    uintptr_t base, uint64_t bytes) {
  const auto none = std::make_pair(mappings_.end(), mappings_.end());
  auto first = mappings_.find(base);
  if (first == mappings_.end() || bytes == 0) return none;
  uintptr_t at = base;
  auto it = first;
  while (it != mappings_.end() && it->first == at && at < base + bytes) {
    at += it->second.bytes;
    ++it;
  }
  return at == base + bytes ? std::make_pair(first, it) : none;
}

cudaError_t VirtualMemory::Unmap(uintptr_t base, uint64_t bytes, uint64_t* freed_device_bytes, double* busy_until) {
  auto [first, last] = Whole(base, bytes);
  if (first == last) return cudaErrorInvalidValue;  // a sub-range of a mapping, or no mapping
  if (!Placeholder(base, bytes)) return cudaErrorUnknown;
  *busy_until = 0;
  for (auto it = first; it != last;) {
    *busy_until = std::max(*busy_until, it->second.busy_until);
    const uint64_t handle = it->second.handle;
    --chunks_.at(handle)->mappings;
    it = mappings_.erase(it);
    Drop(handle, freed_device_bytes);
  }
  return cudaSuccess;
}

cudaError_t VirtualMemory::SetAccess(uintptr_t base, uint64_t bytes, Access access) {
  auto [first, last] = Whole(base, bytes);
  if (first == last) return cudaErrorInvalidValue;  // the range must be mapped, whole mappings
  if (mprotect(reinterpret_cast<void*>(base), bytes, Protection(access)) != 0) return cudaErrorUnknown;
  for (auto it = first; it != last; ++it) it->second.access = access;
  return cudaSuccess;
}

const Mapping* VirtualMemory::FindMapping(uintptr_t addr) const {
  auto it = mappings_.upper_bound(addr);
  if (it == mappings_.begin()) return nullptr;
  --it;
  return addr < it->first + it->second.bytes ? &it->second : nullptr;
}

cudaError_t VirtualMemory::GetAccess(uintptr_t addr, Access* access) const {
  const Mapping* m = FindMapping(addr);
  if (m == nullptr || access == nullptr) return cudaErrorInvalidValue;
  *access = m->access;
  return cudaSuccess;
}

cudaError_t VirtualMemory::Retain(uintptr_t addr, uint64_t* handle) {
  const Mapping* m = FindMapping(addr);
  if (m == nullptr || handle == nullptr) return cudaErrorInvalidValue;
  ++chunks_.at(m->handle)->references;
  *handle = m->handle;
  return cudaSuccess;
}

const Chunk* VirtualMemory::FindChunk(uint64_t handle) const {
  auto it = chunks_.find(handle);
  return it == chunks_.end() || it->second->references == 0 ? nullptr : it->second.get();
}

VmmSpan VirtualMemory::Classify(uintptr_t addr, uint64_t bytes) const {
  VmmSpan span;
  const uintptr_t end = addr + std::max<uint64_t>(bytes, 1);
  for (uintptr_t at = addr; at < end;) {
    const auto* r = ReservationOf(at);
    if (r == nullptr) {  // outside the reservations: skip to the next one
      auto next = reservations_.upper_bound(at);
      if (next == reservations_.end()) break;
      at = next->first;
      continue;
    }
    const Mapping* m = FindMapping(at);
    if (m == nullptr || m->access == Access::kNone) {
      span.illegal = true;
      return span;
    }
    const uintptr_t stop = std::min<uintptr_t>(end, m->base + m->bytes);
    (ChunkOf(*m).on_host ? span.host_bytes : span.device_bytes) += stop - at;
    at = stop;
  }
  return span;
}

void VirtualMemory::MarkBusy(uintptr_t addr, uint64_t bytes, double end) {
  auto it = mappings_.upper_bound(addr);
  if (it != mappings_.begin()) --it;
  for (; it != mappings_.end() && it->first < addr + bytes; ++it) {
    if (it->first + it->second.bytes > addr) it->second.busy_until = std::max(it->second.busy_until, end);
  }
}

}  // namespace simcuda
