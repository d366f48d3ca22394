// The simulated device's virtual address range: one large reservation that device allocations are carved from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace simcuda {

// Device pointers are host addresses inside one PROT_NONE reservation, so CPU kernel bodies dereference them
// directly, they never collide with heap pointers, and a freed range faults on use (as on a GPU). Allocated
// ranges are made readable and writable; freed ones give their pages back to the kernel.
class AddressSpace {
 public:
  explicit AddressSpace(uint64_t reserve_bytes);
  ~AddressSpace();
  AddressSpace(const AddressSpace&) = delete;
  AddressSpace& operator=(const AddressSpace&) = delete;

  bool ok() const { return base_ != 0; }
  // First fit of `bytes` (rounded up to whole host pages) at a multiple of `align` (a power of two); 0 when the
  // reservation is exhausted. The returned pages read as zero; `accessible` false leaves them inaccessible (a
  // virtual memory reservation, which mappings make accessible).
  uintptr_t Allocate(uint64_t bytes, uint64_t align, bool accessible = true);
  // Gives back a range returned by Allocate with the same `bytes`.
  void Release(uintptr_t addr, uint64_t bytes);
  bool Contains(uintptr_t addr) const { return addr >= base_ && addr < base_ + size_; }

 private:
  uintptr_t base_ = 0;
  uint64_t size_ = 0;
  std::map<uintptr_t, uint64_t> free_;  // start -> length, coalesced
};

}  // namespace simcuda
