// How a hook describes an intercepted operation to the session.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/session/arena.h"
#include "runtime/trace/model.h"

namespace karma::rt {

enum class Access : uint8_t { kRead = 1, kWrite = 2, kReadWrite = 3, kTouch = 4 };

// A pointer operand whose direction the API defines (library calls, copies, memsets).
struct Operand {
  uint64_t ptr = 0;
  Access access = Access::kTouch;
  bool workspace = false;  // scratch memory of a library call
};

struct OpDesc {
  trace::OpKind kind = trace::OpKind::kKernel;
  StreamKey stream = 0;
  // Kernels: the function (host stub for the runtime API, CUfunction for the driver API) and its arguments,
  // which the session scans for buffers.
  const void* func = nullptr;
  bool driver = false;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  void* const* args = nullptr;
  void* const* extra = nullptr;
  // Library calls, copies and memsets: a static name and the exact operands.
  const char* name = nullptr;
  std::vector<Operand> operands;
  uint64_t shape = 0;        // the non-pointer arguments that tell calls apart (dimensions, sizes)
  uint64_t flops = 0;
  uint64_t bytes = 0;        // bytes the call reads and writes when the API tells; 0: sum of its buffers
  const char* dtype = nullptr;
};

inline uint64_t AddressOf(const void* p) { return reinterpret_cast<uint64_t>(p); }
inline uint64_t AddressOf(CUdeviceptr p) { return p; }

// Combines a value into a signature hash: one multiply-xorshift round per word (signatures are computed for every
// op while detecting, so this is on the hot path; collisions only cost detection a little discrimination).
inline uint64_t HashMix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}
inline constexpr uint64_t kHashSeed = 1469598103934665603ull;

}  // namespace karma::rt
