// The driver-entry-point hooks: the real lookup runs, and for exactly the names the table hooks (at a version
// and stream flavour whose ABI the wrapper implements) the wrapper is handed out and the driver's answer kept
// as that wrapper's real function.
#include <atomic>

#include "interpose/hooks.h"
#include "interpose/lookup.h"
#include "interpose/real.h"

namespace karma::interpose {

void* WrapperAddress(HookId id);

namespace {

void* Substitute(const char* symbol, void* found, int version, uint64_t flags) {
  if (symbol == nullptr || found == nullptr) return found;
  const HookId id = ChooseLookupHook(Hooks(), symbol, version, RequestedFlavor(flags));
  if (id == HookId::kCount) return found;
  void* wrapper = WrapperAddress(id);
  // A lookup that already answers with our wrapper (another interposer forwarding) must not make it its own real.
  if (found == wrapper) return found;
  SetReal(id, found);
  return wrapper;
}

// cudaGetDriverEntryPoint asks for the ABI of the runtime's own version.
int RuntimeVersion() {
  static std::atomic<int> cached{0};
  int v = cached.load(std::memory_order_relaxed);
  if (v != 0) return v;
  v = CUDART_VERSION;
  using Fn = cudaError_t (*)(int*);
  if (auto fn = reinterpret_cast<Fn>(ResolveReal(rt::CudaLib::kCudart, "cudaRuntimeGetVersion"))) {
    int got = 0;
    if (fn(&got) == cudaSuccess && got > 0) v = got;
  }
  cached.store(v, std::memory_order_relaxed);
  return v;
}

}  // namespace
}  // namespace karma::interpose

namespace karma::hook {

CUresult cuGetProcAddress(cuGetProcAddress_fn real, const char* symbol, void** pfn, int cudaVersion,
                          cuuint64_t flags) {
  const CUresult r = real(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = interpose::Substitute(symbol, *pfn, cudaVersion, flags);
  return r;
}

CUresult cuGetProcAddress_v2(cuGetProcAddress_v2_fn real, const char* symbol, void** pfn, int cudaVersion,
                             cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus) {
  const CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
  const bool found = symbolStatus == nullptr || *symbolStatus == CU_GET_PROC_ADDRESS_SUCCESS;
  if (r == CUDA_SUCCESS && found && pfn != nullptr) {
    *pfn = interpose::Substitute(symbol, *pfn, cudaVersion, flags);
  }
  return r;
}

cudaError_t cudaGetDriverEntryPoint(cudaGetDriverEntryPoint_fn real, const char* symbol, void** funcPtr,
                                    unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus) {
  const cudaError_t r = real(symbol, funcPtr, flags, driverStatus);
  const bool found = driverStatus == nullptr || *driverStatus == cudaDriverEntryPointSuccess;
  if (r == cudaSuccess && found && funcPtr != nullptr) {
    *funcPtr = interpose::Substitute(symbol, *funcPtr, interpose::RuntimeVersion(), flags);
  }
  return r;
}

cudaError_t cudaGetDriverEntryPointByVersion(cudaGetDriverEntryPointByVersion_fn real, const char* symbol,
                                             void** funcPtr, unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  const cudaError_t r = real(symbol, funcPtr, cudaVersion, flags, driverStatus);
  const bool found = driverStatus == nullptr || *driverStatus == cudaDriverEntryPointSuccess;
  if (r == cudaSuccess && found && funcPtr != nullptr) {
    *funcPtr = interpose::Substitute(symbol, *funcPtr, static_cast<int>(cudaVersion), flags);
  }
  return r;
}

}  // namespace karma::hook
