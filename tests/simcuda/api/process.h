// The process-wide simulated device shared by libcudart.so.13, libcuda.so.1 and libcublas.so.13 (libsimcuda.so).
#pragma once

#include "device/device.h"

namespace simcuda {

// The device, created from the SIMCUDA_* variables on first use; its statistics go to SIMCUDA_STATS at exit.
// Null only when the device's address range cannot be reserved (the reason is printed once).
Device* Global();

// Prints "simcuda: <message>" to stderr once per distinct message.
void WarnOnce(const char* message);

// cudaMemcpyBatchAsync and cuMemcpyBatchAsync (either ABI): the checks both make, then each copy in stream order
// on `stream` (the batch's copies have no order among themselves; here they run one after the other). The
// legacy default stream (null) is refused, the per-thread one taken; every attribute entry needs a source access
// order, the first applies from copy 0 and each next one from a later copy.
template <typename Attributes>
cudaError_t MemcpyBatch(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                        const Attributes* attrs, const size_t* attrs_idxs, size_t num_attrs, cudaStream_t stream) {
  Device* d = Global();
  if (d == nullptr) return cudaErrorNoDevice;
  if (count == 0 || dsts == nullptr || srcs == nullptr || sizes == nullptr || attrs == nullptr ||
      attrs_idxs == nullptr || num_attrs == 0 || num_attrs > count || attrs_idxs[0] != 0 || stream == nullptr) {
    return cudaErrorInvalidValue;
  }
  for (size_t a = 0; a < num_attrs; ++a) {
    if (static_cast<int>(attrs[a].srcAccessOrder) == 0) return cudaErrorInvalidValue;
    if (a > 0 && (attrs_idxs[a] <= attrs_idxs[a - 1] || attrs_idxs[a] >= count)) return cudaErrorInvalidValue;
  }
  for (size_t i = 0; i < count; ++i) {
    const cudaError_t e = d->Memcpy(dsts[i], srcs[i], sizes[i], cudaMemcpyDefault, stream, false);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace simcuda

// Called by the generated stubs of every exported CUDA function simcuda does not implement: says so once per
// function and returns `code` (the library's "not supported" status).
extern "C" int simcuda_unimplemented(const char* name, int code);
