// A stand-in libcudart.so.13 (its SONAME) for the libkarma.so tests: the few runtime functions the session
// calls for itself (managed memory over malloc, events that are always complete), a counting cudaMalloc/cudaFree,
// and cudaGetDriverEntryPoint* that forward to the fake driver's cuGetProcAddress.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>

namespace {
int g_mallocs = 0;
int g_frees = 0;
int g_managed = 0;
cudaError_t g_last = cudaSuccess;
}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** p, size_t size) {
  g_mallocs++;
  *p = std::malloc(size);
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  g_frees++;
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocManaged(void** p, size_t size, unsigned int) {
  g_managed++;
  *p = std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  return *p != nullptr ? cudaSuccess : (g_last = cudaErrorMemoryAllocation);
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *free = 1ull << 30;
  *total = 2ull << 30;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_last; }
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  *e = reinterpret_cast<cudaEvent_t>(std::malloc(8));
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  std::free(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  using Lookup = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto lookup = reinterpret_cast<Lookup>(dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "cuGetProcAddress_v2"));
  CUdriverProcAddressQueryResult s = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = lookup != nullptr ? lookup(symbol, fn, static_cast<int>(version), flags, &s) : CUDA_ERROR_NOT_FOUND;
  if (status != nullptr) {
    *status = s == CU_GET_PROC_ADDRESS_SUCCESS ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  }
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorSymbolNotFound;
}

int fake_cudart_mallocs() { return g_mallocs; }
int fake_cudart_frees() { return g_frees; }
int fake_cudart_managed() { return g_managed; }

}  // extern "C"
