// The page managed memory moves by, and the arithmetic on it: shared by the session's arena and executor and by
// the MPI shim's prefetches.
#pragma once

#include <cstdint>

namespace karma {

// What the driver moves and backs with device memory at a time: prefetches and discards are rounded to the CPU
// page (4 KiB on x86-64, 64 KiB on arm64), and a partly resident 2 MiB block takes device memory in 64 KiB
// chunks. So a buffer costs its bytes rounded to 64 KiB, not a 2 MiB span.
inline constexpr uint64_t kResidencyPage = 64ull << 10;

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
inline constexpr uint64_t AlignDown(uint64_t v, uint64_t a) { return v / a * a; }
// `bytes` (a size or an address) rounded up to whole residency pages.
inline constexpr uint64_t PageUp(uint64_t bytes) { return AlignUp(bytes, kResidencyPage); }
// The bytes of the whole pages (residency pages unless `page` says otherwise) inside [addr, addr + bytes), which
// start at AlignUp(addr, page): what moving that range moves without taking a neighbour's bytes along.
inline constexpr uint64_t OwnedPageBytes(uint64_t addr, uint64_t bytes, uint64_t page = kResidencyPage) {
  const uint64_t lo = AlignUp(addr, page), hi = AlignDown(addr + bytes, page);
  return hi > lo ? hi - lo : 0;
}

}  // namespace karma
