// The exported symbols of libkarma.so: one wrapper per hook-table row, generated, plus the public C API.
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdlib>
#include <type_traits>

#include "include/karma/karma.h"
#include "interpose/hooks.h"
#include "interpose/real.h"
#include "runtime/session/session.h"

#define KARMA_EXPORT __attribute__((visibility("default")))

// Symbols cuda.h does not declare in a normal build: the v1 ABI of cuGetProcAddress (the name is a macro for
// _v2) and the per-thread-stream entry points. Their types are checked against the toolkit's PFN typedefs.
extern "C" {
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                        void** kernelParams);
int nvtxRangePushA(const char* message);
int nvtxRangePop(void);
}
static_assert(std::is_same_v<decltype(&cuGetProcAddress), PFN_cuGetProcAddress_v11030>);
static_assert(std::is_same_v<decltype(&cuGetProcAddress_v2), PFN_cuGetProcAddress_v12000>);
static_assert(std::is_same_v<decltype(&cuMemAllocAsync_ptsz), PFN_cuMemAllocAsync_v11020_ptsz>);
static_assert(std::is_same_v<decltype(&cuMemFreeAsync_ptsz), PFN_cuMemFreeAsync_v11020_ptsz>);
static_assert(std::is_same_v<decltype(&cuLaunchKernel_ptsz), PFN_cuLaunchKernel_v7000_ptsz>);
static_assert(std::is_same_v<decltype(&cuLaunchKernelEx_ptsz), PFN_cuLaunchKernelEx_v11060_ptsz>);
static_assert(std::is_same_v<decltype(&cuLaunchCooperativeKernel), PFN_cuLaunchCooperativeKernel_v9000>);
static_assert(std::is_same_v<decltype(&cuLaunchCooperativeKernel_ptsz), PFN_cuLaunchCooperativeKernel_v9000_ptsz>);
static_assert(std::is_same_v<decltype(&cuMemAlloc_v2), PFN_cuMemAlloc_v3020>);
static_assert(std::is_same_v<decltype(&cuLaunchKernel), PFN_cuLaunchKernel_v4000>);

// cudaGetDriverEntryPoint is deprecated, and hooked because applications still call it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

// Resolve the real function; inside another hook, call it directly; else call the one handler.
#define KARMA_WRAPPER(lib, ret, name, params, args, lookup)                                                    \
  extern "C" KARMA_EXPORT ret name params {                                                                  \
    using Fn = ::karma::hook::name##_fn;                                                                      \
    const Fn real = ::karma::interpose::Real<Fn>(::karma::interpose::HookId::name);                           \
    if (real == nullptr) return static_cast<ret>(::karma::interpose::MissingError(::karma::rt::CudaLib::lib)); \
    if (::karma::interpose::InHook()) return real args;                                                       \
    ::karma::interpose::HookScope scope;                                                                      \
    return ::karma::hook::name KARMA_PREPEND(real, args);                                                     \
  }
KARMA_HOOK_TABLE(KARMA_WRAPPER)
#undef KARMA_WRAPPER

namespace karma::interpose {

// What a lookup hands out in place of the driver's function.
void* WrapperAddress(HookId id) {
  static void* const kWrappers[] = {
#define KARMA_WRAPPER_ADDRESS(lib, ret, name, params, args, lookup) \
  reinterpret_cast<void*>(static_cast<::karma::hook::name##_fn>(&::name)),
      KARMA_HOOK_TABLE(KARMA_WRAPPER_ADDRESS)
#undef KARMA_WRAPPER_ADDRESS
  };
  static_assert(std::size(kWrappers) == kHookCount);
  return kWrappers[static_cast<size_t>(id)];
}

}  // namespace karma::interpose

// ---- the public C API ----

extern "C" KARMA_EXPORT void karma_iteration_begin(void) {
  if (karma::interpose::InHook()) return;
  karma::interpose::HookScope scope;
  if (karma::rt::Session* s = karma::rt::Session::Get()) s->OnIterationMarker();
}

extern "C" KARMA_EXPORT const char* karma_version(void) { return KARMA_VERSION_STRING; }

// The session calls the real libraries through the same resolution as the hooks (installed before any hook can
// run). And NVTX3 (header-only, as in PyTorch) delivers ranges only to an injection library it loads itself at
// its first call: with an iteration marker requested and no other NVTX tool, that library is this one. The
// frameworks' allocator switches are set here too (rt::ApplyAllocatorsAtLoad), before an import reads them. All of it
// happens while the process is still single-threaded, before main, when preloaded.
__attribute__((constructor)) static void AtLoad() {
  karma::rt::SetRealSymbolResolver(&karma::interpose::ResolveOrLoad);
  karma::rt::ApplyAllocatorsAtLoad();
  const char* marker = std::getenv("KARMA_ITERATION_MARKER");
  if (marker == nullptr || *marker == '\0' || std::getenv("NVTX_INJECTION64_PATH") != nullptr) return;
  Dl_info self{};
  if (dladdr(reinterpret_cast<const void*>(&AtLoad), &self) != 0 && self.dli_fname != nullptr) {
    setenv("NVTX_INJECTION64_PATH", self.dli_fname, 0);
  }
}
