// The CUDA functions the session calls on its own behalf: one table of pointers that interpose/ fills from the
// real libraries and tests fill with fakes, so the session never names a CUDA symbol directly.
#pragma once

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <span>

namespace karma::rt {

// The libraries a CUDA symbol can come from (interpose/ maps each to its sonames).
enum class CudaLib : uint8_t { kCudart = 0, kDriver = 1, kCublas = 2, kCudnn = 3, kNvtx = 4 };
inline constexpr int kCudaLibCount = 5;
const char* CudaLibName(CudaLib lib);
// Sonames tried, in order, when RTLD_NEXT does not find a symbol (13 first: the toolkit we build against).
std::span<const char* const> CudaLibSonames(CudaLib lib);

}  // namespace karma::rt

// X(LIB, NAME): LIB is a CudaLib enumerator; NAME the exact exported symbol (versioned names spelled out).
// Only what the session needs for itself: managed segments (and the profiling iteration's scratch), events for
// stream-ordered reuse and timing, kernel parameter layouts and names, library state needed to read a call's
// exact operands, the streams, prefetches, discards and copies of the replay executor, and the virtual memory
// calls, copies and stream waits of the copy residency.
#define KARMA_CUDA_API_TABLE(X)            \
  X(kCudart, cudaMallocManaged)            \
  X(kCudart, cudaMalloc)                   \
  X(kCudart, cudaFree)                     \
  X(kCudart, cudaMallocHost)               \
  X(kCudart, cudaFreeHost)                 \
  X(kCudart, cudaMemGetInfo)               \
  X(kCudart, cudaGetDevice)                \
  X(kCudart, cudaSetDevice)                \
  X(kCudart, cudaGetLastError)             \
  X(kCudart, cudaPeekAtLastError)          \
  X(kCudart, cudaRuntimeGetVersion)        \
  X(kCudart, cudaEventCreateWithFlags)     \
  X(kCudart, cudaEventDestroy)             \
  X(kCudart, cudaEventRecord)              \
  X(kCudart, cudaEventQuery)               \
  X(kCudart, cudaEventSynchronize)         \
  X(kCudart, cudaEventElapsedTime)         \
  X(kCudart, cudaGetDeviceProperties)      \
  X(kCudart, cudaStreamCreateWithFlags)    \
  X(kCudart, cudaStreamDestroy)            \
  X(kCudart, cudaStreamWaitEvent)          \
  X(kCudart, cudaStreamSynchronize)        \
  X(kCudart, cudaMemcpyAsync)              \
  X(kCudart, cudaMemPrefetchAsync)         \
  X(kCudart, cudaMemPrefetchBatchAsync)    \
  X(kCudart, cudaMemDiscardBatchAsync)     \
  X(kCudart, cudaMemDiscardAndPrefetchBatchAsync) \
  X(kCudart, cudaFuncGetParamInfo)         \
  X(kCudart, cudaFuncGetName)              \
  X(kDriver, cuFuncGetParamInfo)           \
  X(kDriver, cuDeviceGetAttribute)         \
  X(kDriver, cuMemGetAllocationGranularity) \
  X(kDriver, cuMemAddressReserve)          \
  X(kDriver, cuMemAddressFree)             \
  X(kDriver, cuMemCreate)                  \
  X(kDriver, cuMemRelease)                 \
  X(kDriver, cuMemMap)                     \
  X(kDriver, cuMemUnmap)                   \
  X(kDriver, cuMemSetAccess)               \
  X(kDriver, cuMemcpyAsync)                \
  X(kDriver, cuStreamWaitValue32_v2)       \
  X(kDriver, cuStreamWriteValue32_v2)      \
  X(kDriver, cuFuncGetName)                \
  X(kCublas, cublasGetPointerMode_v2)      \
  X(kCublas, cublasGetStream_v2)           \
  X(kCudnn, cudnnGetStream)                \
  X(kCudnn, cudnnGetTensorNdDescriptor)    \
  X(kCudnn, cudnnGetFilterNdDescriptor)    \
  X(kCudnn, cudnnBackendGetAttribute)      \
  X(kCudnn, cudnnBackendCreateDescriptor)  \
  X(kCudnn, cudnnBackendDestroyDescriptor) \
  X(kCudnn, cudnnBackendSetAttribute)      \
  X(kCudnn, cudnnBackendFinalize)          \
  X(kCudnn, cudnnCreateTensorDescriptor)   \
  X(kCudnn, cudnnSetTensorNdDescriptor)    \
  X(kCudnn, cudnnDestroyTensorDescriptor)  \
  X(kCudnn, cudnnCreateFilterDescriptor)   \
  X(kCudnn, cudnnSetFilterNdDescriptor)    \
  X(kCudnn, cudnnDestroyFilterDescriptor)  \
  X(kCudnn, cudnnCreateConvolutionDescriptor) \
  X(kCudnn, cudnnGetConvolutionNdDescriptor) \
  X(kCudnn, cudnnSetConvolutionNdDescriptor) \
  X(kCudnn, cudnnGetConvolutionMathType)   \
  X(kCudnn, cudnnSetConvolutionMathType)   \
  X(kCudnn, cudnnGetConvolutionGroupCount) \
  X(kCudnn, cudnnSetConvolutionGroupCount) \
  X(kCudnn, cudnnDestroyConvolutionDescriptor)

namespace karma::rt {

struct CudaApi {
#define KARMA_CUDA_API_FIELD(lib, name) decltype(&::name) name = nullptr;
  KARMA_CUDA_API_TABLE(KARMA_CUDA_API_FIELD)
#undef KARMA_CUDA_API_FIELD
};

enum class CudaApiId : uint16_t {
#define KARMA_CUDA_API_ENUM(lib, name) name,
  KARMA_CUDA_API_TABLE(KARMA_CUDA_API_ENUM)
#undef KARMA_CUDA_API_ENUM
      kCount
};

// The CUDA runtime keeps a per-thread "last error" that the application reads with cudaGetLastError. A call the
// session makes for itself must not leave an error there that the application's own calls would not have left:
// declare one of these before such calls and Failed() after each that fails; when the application had no error
// pending, the session's error is cleared again on destruction.
class LastErrorScope {
 public:
  explicit LastErrorScope(const CudaApi& api);
  ~LastErrorScope();
  LastErrorScope(const LastErrorScope&) = delete;
  LastErrorScope& operator=(const LastErrorScope&) = delete;
  void Failed() { failed_ = true; }
  // Keep the error of the last failure (e.g. an allocation failure the application should see).
  void Keep() { failed_ = false; }

 private:
  const CudaApi& api_;
  bool clean_before_ = false;
  bool failed_ = false;
};

// The real device memory (cudaMemGetInfo) without leaving an error for the application; false when unknown.
bool RealMemGetInfo(const CudaApi& api, size_t* free, size_t* total);

// Fills every entry with `resolve(lib, name)` (nullptr where a symbol is missing).
using SymbolResolver = void* (*)(CudaLib lib, const char* name);
CudaApi LoadCudaApi(SymbolResolver resolve);

// interpose/ installs the resolver of the real libraries before any hook runs; the session uses it on start.
void SetRealSymbolResolver(SymbolResolver resolve);
SymbolResolver RealSymbolResolver();

}  // namespace karma::rt
