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

// FNV-1a steps for signatures.
inline uint64_t HashMix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}
inline constexpr uint64_t kHashSeed = 1469598103934665603ull;

}  // namespace karma::rt
