// The reserved device address range and its first-fit allocator.
#include "device/address_space.h"

#include <sys/mman.h>
#include <unistd.h>

#include <iterator>

namespace simcuda {
namespace {

// Where the reservation is asked for: high above the heap and below where ASan and glibc place their mappings.
constexpr uintptr_t kPreferredBase = 0x200000000000ull;

uint64_t HostPage() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

AddressSpace::AddressSpace(uint64_t reserve_bytes) {
  const uint64_t size = RoundUp(reserve_bytes, 2ull << 20);
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void* p = mmap(reinterpret_cast<void*>(kPreferredBase), size, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) p = mmap(nullptr, size, PROT_NONE, flags, -1, 0);
  if (p == MAP_FAILED) return;
  base_ = reinterpret_cast<uintptr_t>(p);
  size_ = size;
  free_[base_] = size_;
}

AddressSpace::~AddressSpace() {
  if (base_ != 0) munmap(reinterpret_cast<void*>(base_), size_);
}

uintptr_t AddressSpace::Allocate(uint64_t bytes, uint64_t align, bool accessible) {
  const uint64_t len = RoundUp(bytes == 0 ? 1 : bytes, HostPage());
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uintptr_t start = RoundUp(it->first, align);
    const uintptr_t end = it->first + it->second;
    if (start + len > end) continue;
    const uintptr_t hole = it->first;
    free_.erase(it);
    if (start > hole) free_[hole] = start - hole;
    if (end > start + len) free_[start + len] = end - (start + len);
    if (accessible && mprotect(reinterpret_cast<void*>(start), len, PROT_READ | PROT_WRITE) != 0) {
      Release(start, bytes);
      return 0;
    }
    return start;
  }
  return 0;
}

void AddressSpace::Release(uintptr_t addr, uint64_t bytes) {
  uint64_t len = RoundUp(bytes == 0 ? 1 : bytes, HostPage());
  madvise(reinterpret_cast<void*>(addr), len, MADV_DONTNEED);
  mprotect(reinterpret_cast<void*>(addr), len, PROT_NONE);
  auto next = free_.lower_bound(addr);
  if (next != free_.end() && next->first == addr + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == addr) {
      prev->second += len;
      return;
    }
  }
  free_[addr] = len;
}

}  // namespace simcuda
