// Streams as keys: how the runtime names a CUDA stream in its maps and records, and back.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace karma::rt {

// A stream handle as an integer. kSyncStream marks cudaMalloc/cudaFree, which are not stream-ordered.
using StreamKey = uintptr_t;
inline constexpr StreamKey kSyncStream = ~StreamKey{0};
// The legacy default stream has two spellings (0 and cudaStreamLegacy); one key for both.
inline StreamKey KeyOf(const void* stream) {
  const auto k = reinterpret_cast<StreamKey>(stream);
  return k == 0x1 ? 0 : k;
}
// The handle to pass to CUDA for a key: kSyncStream's work goes to the legacy default stream.
inline cudaStream_t StreamOf(StreamKey k) { return k == kSyncStream ? nullptr : reinterpret_cast<cudaStream_t>(k); }

}  // namespace karma::rt
