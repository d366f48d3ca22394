// A stand-in libcuda.so.1 (its SONAME) for the libkarma.so tests: cuGetProcAddress answers with its own
// implementations, different functions from its exported symbols, and counts their calls.
#include <cuda.h>

#include <cstring>

namespace {

int g_launches = 0;
int g_launches_ptsz = 0;
int g_allocs = 0;

CUresult ImplLaunch(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**,
                    void**) {
  g_launches++;
  return CUDA_SUCCESS;
}
CUresult ImplLaunchPtsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void**, void**) {
  g_launches_ptsz++;
  return CUDA_SUCCESS;
}
CUresult ImplMemAlloc(CUdeviceptr* p, size_t) {
  g_allocs++;
  *p = 0x700000000000ull;
  return CUDA_SUCCESS;
}
CUresult ImplOther() { return CUDA_SUCCESS; }

}  // namespace

extern "C" {

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  void* f = nullptr;
  if (std::strcmp(symbol, "cuLaunchKernel") == 0) {
    f = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 ? reinterpret_cast<void*>(&ImplLaunchPtsz)
                                                                      : reinterpret_cast<void*>(&ImplLaunch);
  } else if (std::strcmp(symbol, "cuMemAlloc") == 0) {
    f = reinterpret_cast<void*>(&ImplMemAlloc);
  } else if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    f = reinterpret_cast<void*>(&cuGetProcAddress_v2);
  } else if (std::strncmp(symbol, "cu", 2) == 0) {
    f = reinterpret_cast<void*>(&ImplOther);  // answers cudnn* and cuMemAllocHost too: only KARMA must not
  }
  if (status != nullptr) *status = f != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (pfn != nullptr) *pfn = f;
  return f != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

int fake_cuda_launches() { return g_launches; }
int fake_cuda_launches_ptsz() { return g_launches_ptsz; }
int fake_cuda_allocs() { return g_allocs; }
void* fake_cuda_impl(const char* which) {
  if (std::strcmp(which, "launch") == 0) return reinterpret_cast<void*>(&ImplLaunch);
  if (std::strcmp(which, "other") == 0) return reinterpret_cast<void*>(&ImplOther);
  return nullptr;
}

}  // extern "C"
