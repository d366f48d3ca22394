// Real-symbol resolution and the re-entry guard.
#include "interpose/real.h"

#include <dlfcn.h>

#include <atomic>

namespace karma::interpose {
namespace {

std::atomic<void*> g_real[kHookCount];
thread_local bool t_in_hook = false;

void* FromLoadedLibrary(rt::CudaLib lib, const char* name, int extra_flags) {
  for (const char* soname : rt::CudaLibSonames(lib)) {
    void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL | extra_flags);
    if (handle == nullptr) continue;
    // Handles are kept: the library stays loaded for the life of the process either way.
    if (void* p = dlsym(handle, name)) return p;
  }
  return nullptr;
}

}  // namespace

void* ResolveReal(rt::CudaLib lib, const char* name) {
  if (void* p = dlsym(RTLD_NEXT, name)) return p;
  return FromLoadedLibrary(lib, name, RTLD_NOLOAD);
}

void* ResolveOrLoad(rt::CudaLib lib, const char* name) {
  if (void* p = ResolveReal(lib, name)) return p;
  // Only the runtime and the driver are worth loading: an application that never loaded cuBLAS or cuDNN
  // never calls them, and their libraries are large.
  if (lib != rt::CudaLib::kCudart && lib != rt::CudaLib::kDriver) return nullptr;
  return FromLoadedLibrary(lib, name, 0);
}

void* RealOf(HookId id) {
  std::atomic<void*>& slot = g_real[static_cast<size_t>(id)];
  void* p = slot.load(std::memory_order_acquire);
  if (p != nullptr) return p;
  // Looked up again on every call while missing: the library may be loaded later, and a missing function is
  // an error path anyway.
  p = ResolveReal(InfoOf(id).lib, InfoOf(id).name);
  if (p != nullptr) {
    void* expected = nullptr;
    if (!slot.compare_exchange_strong(expected, p, std::memory_order_acq_rel)) p = expected;
  }
  return p;
}

void SetReal(HookId id, void* fn) {
  if (fn != nullptr) g_real[static_cast<size_t>(id)].store(fn, std::memory_order_release);
}

int MissingError(rt::CudaLib lib) {
  switch (lib) {
    case rt::CudaLib::kCudart: return cudaErrorInitializationError;
    case rt::CudaLib::kDriver: return CUDA_ERROR_NOT_INITIALIZED;
    case rt::CudaLib::kCublas: return CUBLAS_STATUS_NOT_INITIALIZED;
    case rt::CudaLib::kCudnn: return CUDNN_STATUS_NOT_INITIALIZED;
    case rt::CudaLib::kNvtx: return -2;  // NVTX_NO_PUSH_POP_TRACKING: what NVTX returns without a tool
  }
  return -1;
}

bool InHook() { return t_in_hook; }
HookScope::HookScope() { t_in_hook = true; }
HookScope::~HookScope() { t_in_hook = false; }

}  // namespace karma::interpose
