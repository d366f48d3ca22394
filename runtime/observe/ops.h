// How a hook describes an intercepted operation to the session.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/base/streams.h"
#include "ground/trace/model.h"

namespace karma::rt {

enum class Access : uint8_t { kRead = 1, kWrite = 2, kReadWrite = 3, kTouch = 4 };

// A pointer operand whose direction the API defines (library calls, copies, memsets).
struct Operand {
  uint64_t ptr = 0;
  Access access = Access::kTouch;
  bool workspace = false;  // scratch memory of a library call
  uint64_t bytes = 0;      // the exact extent from ptr when the API tells it (GEMM operands, copies); 0: unknown
  // The extent has bytes the operand skips (a leading dimension above the rows, room between a batch's matrices):
  // they may belong to another tensor, and a write leaves them as they were.
  bool gaps = false;
};

// How a kernel was launched, so that the executor can launch it again with the same arguments (recompute).
enum class LaunchApi : uint8_t { kNone = 0, kRuntime = 1, kDriver = 2 };

// Address ranges a re-issued launch uses elsewhere: a recompute redirects outputs whose recorded memory now
// belongs to someone else into scratch memory. Pointers outside every range stay as they are.
struct AddressMap {
  struct Entry {
    uint64_t from = 0, bytes = 0, to = 0;
  };
  std::vector<Entry> entries;
  uint64_t operator()(uint64_t p) const {
    for (const Entry& e : entries) {
      if (p >= e.from && p < e.from + e.bytes) return e.to + (p - e.from);
    }
    return p;
  }
};

// A call that issues a recorded op again on its recorded stream with its pointers mapped; true when the real
// launch succeeded. Null: the op cannot be issued again.
using Relaunch = std::shared_ptr<const std::function<bool(const AddressMap&)>>;

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
  LaunchApi launch_api = LaunchApi::kNone;  // kNone: cannot be launched again (extended configs, extra buffers)
  const void* launch_real = nullptr;        // the real cudaLaunchKernel / cuLaunchKernel
  uint32_t shared_bytes = 0;
  // Library calls, copies and memsets: a static name and the exact operands.
  const char* name = nullptr;
  std::vector<Operand> operands;
  uint64_t shape = 0;        // the non-pointer arguments that tell calls apart (dimensions, sizes)
  uint64_t flops = 0;
  uint64_t bytes = 0;        // bytes the call reads and writes when the API tells; 0: sum of its buffers
  const char* dtype = nullptr;
  // Library calls, while observing: issues the same call again (empty: not supported for this call).
  std::function<bool(const AddressMap&)> relaunch;
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
