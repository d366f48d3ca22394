// THE table of every symbol libkarma.so hooks. The hook ids, the name table, the handler declarations, the
// real-function slots, the exported wrappers and the linker's export list are all generated from it.
// This header has no includes: the linker script is made from it by the C preprocessor alone.
#pragma once

// X(LIB, RET, NAME, PARAMS, ARGS, LOOKUP)
//   LIB     the library the real symbol lives in (a karma::rt::CudaLib enumerator)
//   RET     the return type; PARAMS the parameter list, ARGS the same names as a call's arguments
//   LOOKUP  how cuGetProcAddress / cudaGetDriverEntryPoint may hand this wrapper out instead of the driver's
//           function: KARMA_NO_LOOKUP, or KARMA_LOOKUP(NAME, MIN_VERSION, END_VERSION, STREAMS): the symbol
//           name asked for, the CUDA versions [MIN, END) (END 0: no end) whose ABI is the one this wrapper
//           implements, and which default-stream flavour it is (kAnyStream, kLegacyStream, kPerThreadStream).
//
// Every handler is karma::hook::NAME(real, ARGS...): it receives the real function and returns what the
// application receives. The runtime implements all but the lookup hooks, which interpose/ answers itself.
#define KARMA_HOOK_TABLE(X)                                                                                      \
  /* ---- CUDA runtime: allocation ---- */                                                                      \
  X(kCudart, cudaError_t, cudaMalloc, (void** devPtr, size_t size), (devPtr, size), KARMA_NO_LOOKUP)           \
  X(kCudart, cudaError_t, cudaFree, (void* devPtr), (devPtr), KARMA_NO_LOOKUP)                                 \
  X(kCudart, cudaError_t, cudaMallocAsync, (void** devPtr, size_t size, cudaStream_t hStream),                  \
    (devPtr, size, hStream), KARMA_NO_LOOKUP)                                                                    \
  X(kCudart, cudaError_t, cudaFreeAsync, (void* devPtr, cudaStream_t hStream), (devPtr, hStream),             \
    KARMA_NO_LOOKUP)                                                                                             \
  X(kCudart, cudaError_t, cudaMallocFromPoolAsync,                                                              \
    (void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream), (ptr, size, memPool, stream),         \
    KARMA_NO_LOOKUP)                                                                                             \
  X(kCudart, cudaError_t, cudaMallocManaged, (void** devPtr, size_t size, unsigned int flags),                  \
    (devPtr, size, flags), KARMA_NO_LOOKUP)                                                                      \
  X(kCudart, cudaError_t, cudaMallocHost, (void** ptr, size_t size), (ptr, size), KARMA_NO_LOOKUP)             \
  X(kCudart, cudaError_t, cudaHostAlloc, (void** pHost, size_t size, unsigned int flags), (pHost, size, flags), \
    KARMA_NO_LOOKUP)                                                                                             \
  X(kCudart, cudaError_t, cudaFreeHost, (void* ptr), (ptr), KARMA_NO_LOOKUP)                                   \
  X(kCudart, cudaError_t, cudaMemGetInfo, (size_t* free, size_t* total), (free, total), KARMA_NO_LOOKUP)       \
  X(kCudart, cudaError_t, cudaPointerGetAttributes, (cudaPointerAttributes* attributes, const void* ptr),       \
    (attributes, ptr), KARMA_NO_LOOKUP)                                                                          \
  /* ---- CUDA runtime: copies and memsets ---- */                                                              \
  X(kCudart, cudaError_t, cudaMemcpy, (void* dst, const void* src, size_t count, cudaMemcpyKind kind),          \
    (dst, src, count, kind), KARMA_NO_LOOKUP)                                                                    \
  X(kCudart, cudaError_t, cudaMemcpyAsync,                                                                      \
    (void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream),                        \
    (dst, src, count, kind, stream), KARMA_NO_LOOKUP)                                                            \
  X(kCudart, cudaError_t, cudaMemcpy2D,                                                                         \
    (void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,                      \
     cudaMemcpyKind kind),                                                                                       \
    (dst, dpitch, src, spitch, width, height, kind), KARMA_NO_LOOKUP)                                            \
  X(kCudart, cudaError_t, cudaMemcpy2DAsync,                                                                    \
    (void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,                      \
     cudaMemcpyKind kind, cudaStream_t stream),                                                                  \
    (dst, dpitch, src, spitch, width, height, kind, stream), KARMA_NO_LOOKUP)                                    \
  X(kCudart, cudaError_t, cudaMemset, (void* devPtr, int value, size_t count), (devPtr, value, count),          \
    KARMA_NO_LOOKUP)                                                                                             \
  X(kCudart, cudaError_t, cudaMemsetAsync, (void* devPtr, int value, size_t count, cudaStream_t stream),        \
    (devPtr, value, count, stream), KARMA_NO_LOOKUP)                                                             \
  X(kCudart, cudaError_t, cudaMemset2D, (void* devPtr, size_t pitch, int value, size_t width, size_t height),   \
    (devPtr, pitch, value, width, height), KARMA_NO_LOOKUP)                                                      \
  X(kCudart, cudaError_t, cudaMemset2DAsync,                                                                    \
    (void* devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream),                   \
    (devPtr, pitch, value, width, height, stream), KARMA_NO_LOOKUP)                                              \
  /* the same for --default-stream per-thread builds (cuda_runtime_api.h renames them) */                       \
  X(kCudart, cudaError_t, cudaMemcpy_ptds,                                                                      \
    (void* dst, const void* src, size_t count, cudaMemcpyKind kind),                                            \
    (dst, src, count, kind), KARMA_NO_LOOKUP)                                                                   \
  X(kCudart, cudaError_t, cudaMemcpyAsync_ptsz,                                                                 \
    (void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream),                       \
    (dst, src, count, kind, stream), KARMA_NO_LOOKUP)                                                           \
  X(kCudart, cudaError_t, cudaMemcpy2D_ptds,                                                                    \
    (void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,                     \
     cudaMemcpyKind kind),                                                                                      \
    (dst, dpitch, src, spitch, width, height, kind), KARMA_NO_LOOKUP)                                           \
  X(kCudart, cudaError_t, cudaMemcpy2DAsync_ptsz,                                                               \
    (void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,                     \
     cudaMemcpyKind kind, cudaStream_t stream),                                                                 \
    (dst, dpitch, src, spitch, width, height, kind, stream), KARMA_NO_LOOKUP)                                   \
  X(kCudart, cudaError_t, cudaMemset_ptds,                                                                      \
    (void* devPtr, int value, size_t count),                                                                    \
    (devPtr, value, count), KARMA_NO_LOOKUP)                                                                    \
  X(kCudart, cudaError_t, cudaMemsetAsync_ptsz,                                                                 \
    (void* devPtr, int value, size_t count, cudaStream_t stream),                                               \
    (devPtr, value, count, stream), KARMA_NO_LOOKUP)                                                            \
  X(kCudart, cudaError_t, cudaMemset2D_ptds,                                                                    \
    (void* devPtr, size_t pitch, int value, size_t width, size_t height),                                       \
    (devPtr, pitch, value, width, height), KARMA_NO_LOOKUP)                                                     \
  X(kCudart, cudaError_t, cudaMemset2DAsync_ptsz,                                                               \
    (void* devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream),                  \
    (devPtr, pitch, value, width, height, stream), KARMA_NO_LOOKUP)                                             \
  X(kCudart, cudaError_t, cudaMemcpyBatchAsync,                                                                 \
    (void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,                             \
     cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, cudaStream_t stream),                     \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream), KARMA_NO_LOOKUP)                            \
  X(kCudart, cudaError_t, cudaMemcpyBatchAsync_ptsz,                                                            \
    (void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,                             \
     cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, cudaStream_t stream),                     \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream), KARMA_NO_LOOKUP)                            \
  /* ---- CUDA runtime: launches ---- */                                                                        \
  X(kCudart, cudaError_t, cudaLaunchKernel,                                                                     \
    (const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem, cudaStream_t stream),         \
    (func, gridDim, blockDim, args, sharedMem, stream), KARMA_NO_LOOKUP)                                         \
  X(kCudart, cudaError_t, cudaLaunchKernelExC, (const cudaLaunchConfig_t* config, const void* func, void** args), \
    (config, func, args), KARMA_NO_LOOKUP)                                                                       \
  X(kCudart, cudaError_t, cudaLaunchKernel_ptsz,                                                                \
    (const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem, cudaStream_t stream),         \
    (func, gridDim, blockDim, args, sharedMem, stream), KARMA_NO_LOOKUP)                                         \
  X(kCudart, cudaError_t, cudaLaunchKernelExC_ptsz,                                                             \
    (const cudaLaunchConfig_t* config, const void* func, void** args), (config, func, args), KARMA_NO_LOOKUP)    \
  /* cooperative launches (grid-wide synchronization): recorded like any kernel, never launched again */        \
  X(kCudart, cudaError_t, cudaLaunchCooperativeKernel,                                                          \
    (const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem, cudaStream_t stream),         \
    (func, gridDim, blockDim, args, sharedMem, stream), KARMA_NO_LOOKUP)                                         \
  X(kCudart, cudaError_t, cudaLaunchCooperativeKernel_ptsz,                                                     \
    (const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem, cudaStream_t stream),         \
    (func, gridDim, blockDim, args, sharedMem, stream), KARMA_NO_LOOKUP)                                         \
  /* what nvcc 13's <<<>>> calls, with the handle __cudaGetKernel gave (crt/host_runtime.h): libcudart serves   \
     it without calling its exported cudaLaunchKernel */                                                        \
  X(kCudart, cudaError_t, __cudaLaunchKernel,                                                                   \
    (cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem, cudaStream_t stream),      \
    (kernel, gridDim, blockDim, args, sharedMem, stream), KARMA_NO_LOOKUP)                                       \
  X(kCudart, cudaError_t, __cudaLaunchKernel_ptsz,                                                              \
    (cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem, cudaStream_t stream),      \
    (kernel, gridDim, blockDim, args, sharedMem, stream), KARMA_NO_LOOKUP)                                       \
  /* ---- CUDA runtime: streams, events, synchronization, capture ---- */                                       \
  X(kCudart, cudaError_t, cudaStreamCreate, (cudaStream_t* pStream), (pStream), KARMA_NO_LOOKUP)               \
  X(kCudart, cudaError_t, cudaStreamCreateWithFlags, (cudaStream_t* pStream, unsigned int flags),               \
    (pStream, flags), KARMA_NO_LOOKUP)                                                                           \
  X(kCudart, cudaError_t, cudaStreamCreateWithPriority,                                                         \
    (cudaStream_t* pStream, unsigned int flags, int priority), (pStream, flags, priority), KARMA_NO_LOOKUP)     \
  X(kCudart, cudaError_t, cudaStreamDestroy, (cudaStream_t stream), (stream), KARMA_NO_LOOKUP)                 \
  X(kCudart, cudaError_t, cudaEventCreate, (cudaEvent_t* event), (event), KARMA_NO_LOOKUP)                     \
  X(kCudart, cudaError_t, cudaEventCreateWithFlags, (cudaEvent_t* event, unsigned int flags), (event, flags),   \
    KARMA_NO_LOOKUP)                                                                                             \
  X(kCudart, cudaError_t, cudaEventDestroy, (cudaEvent_t event), (event), KARMA_NO_LOOKUP)                     \
  X(kCudart, cudaError_t, cudaEventRecord, (cudaEvent_t event, cudaStream_t stream), (event, stream),           \
    KARMA_NO_LOOKUP)                                                                                             \
  X(kCudart, cudaError_t, cudaStreamWaitEvent, (cudaStream_t stream, cudaEvent_t event, unsigned int flags),    \
    (stream, event, flags), KARMA_NO_LOOKUP)                                                                     \
  X(kCudart, cudaError_t, cudaEventSynchronize, (cudaEvent_t event), (event), KARMA_NO_LOOKUP)                 \
  X(kCudart, cudaError_t, cudaStreamSynchronize, (cudaStream_t stream), (stream), KARMA_NO_LOOKUP)             \
  X(kCudart, cudaError_t, cudaDeviceSynchronize, (), (), KARMA_NO_LOOKUP)                                      \
  X(kCudart, cudaError_t, cudaStreamBeginCapture, (cudaStream_t stream, cudaStreamCaptureMode mode),            \
    (stream, mode), KARMA_NO_LOOKUP)                                                                             \
  X(kCudart, cudaError_t, cudaStreamBeginCaptureToGraph,                                                        \
    (cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t* dependencies,                                \
     const cudaGraphEdgeData* dependencyData, size_t numDependencies, cudaStreamCaptureMode mode),               \
    (stream, graph, dependencies, dependencyData, numDependencies, mode), KARMA_NO_LOOKUP)                       \
  X(kCudart, cudaError_t, cudaStreamEndCapture, (cudaStream_t stream, cudaGraph_t* pGraph), (stream, pGraph),   \
    KARMA_NO_LOOKUP)                                                                                             \
  /* ---- CUDA runtime: driver entry points ---- */                                                             \
  X(kCudart, cudaError_t, cudaGetDriverEntryPoint,                                                              \
    (const char* symbol, void** funcPtr, unsigned long long flags,                                               \
     cudaDriverEntryPointQueryResult* driverStatus),                                                             \
    (symbol, funcPtr, flags, driverStatus), KARMA_NO_LOOKUP)                                                     \
  X(kCudart, cudaError_t, cudaGetDriverEntryPointByVersion,                                                     \
    (const char* symbol, void** funcPtr, unsigned int cudaVersion, unsigned long long flags,                     \
     cudaDriverEntryPointQueryResult* driverStatus),                                                             \
    (symbol, funcPtr, cudaVersion, flags, driverStatus), KARMA_NO_LOOKUP)                                        \
  /* ---- driver API ---- */                                                                                    \
  X(kDriver, CUresult, cuMemAlloc_v2, (CUdeviceptr* dptr, size_t bytesize), (dptr, bytesize),                   \
    KARMA_LOOKUP("cuMemAlloc", 3020, 0, kAnyStream))                                                             \
  X(kDriver, CUresult, cuMemFree_v2, (CUdeviceptr dptr), (dptr), KARMA_LOOKUP("cuMemFree", 3020, 0, kAnyStream)) \
  X(kDriver, CUresult, cuMemAllocAsync, (CUdeviceptr* dptr, size_t bytesize, CUstream hStream),                 \
    (dptr, bytesize, hStream), KARMA_LOOKUP("cuMemAllocAsync", 11020, 0, kLegacyStream))                         \
  X(kDriver, CUresult, cuMemAllocAsync_ptsz, (CUdeviceptr* dptr, size_t bytesize, CUstream hStream),            \
    (dptr, bytesize, hStream), KARMA_LOOKUP("cuMemAllocAsync", 11020, 0, kPerThreadStream))                      \
  X(kDriver, CUresult, cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream),                   \
    KARMA_LOOKUP("cuMemFreeAsync", 11020, 0, kLegacyStream))                                                     \
  X(kDriver, CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream),              \
    KARMA_LOOKUP("cuMemFreeAsync", 11020, 0, kPerThreadStream))                                                  \
  X(kDriver, CUresult, cuMemAllocManaged, (CUdeviceptr* dptr, size_t bytesize, unsigned int flags),             \
    (dptr, bytesize, flags), KARMA_LOOKUP("cuMemAllocManaged", 6000, 0, kAnyStream))                             \
  X(kDriver, CUresult, cuMemGetInfo_v2, (size_t* free, size_t* total), (free, total),                           \
    KARMA_LOOKUP("cuMemGetInfo", 3020, 0, kAnyStream))                                                           \
  X(kDriver, CUresult, cuLaunchKernel,                                                                          \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,  \
     unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,              \
     void** kernelParams, void** extra),                                                                         \
    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams,    \
     extra),                                                                                                     \
    KARMA_LOOKUP("cuLaunchKernel", 4000, 0, kLegacyStream))                                                      \
  X(kDriver, CUresult, cuLaunchKernel_ptsz,                                                                     \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,  \
     unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,              \
     void** kernelParams, void** extra),                                                                         \
    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams,    \
     extra),                                                                                                     \
    KARMA_LOOKUP("cuLaunchKernel", 7000, 0, kPerThreadStream))                                                   \
  X(kDriver, CUresult, cuLaunchKernelEx,                                                                        \
    (const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra),                             \
    (config, f, kernelParams, extra), KARMA_LOOKUP("cuLaunchKernelEx", 11060, 0, kLegacyStream))                 \
  X(kDriver, CUresult, cuLaunchKernelEx_ptsz,                                                                   \
    (const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra),                             \
    (config, f, kernelParams, extra), KARMA_LOOKUP("cuLaunchKernelEx", 11060, 0, kPerThreadStream))              \
  X(kDriver, CUresult, cuLaunchCooperativeKernel,                                                               \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,  \
     unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,              \
     void** kernelParams),                                                                                       \
    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams),   \
    KARMA_LOOKUP("cuLaunchCooperativeKernel", 9000, 0, kLegacyStream))                                           \
  X(kDriver, CUresult, cuLaunchCooperativeKernel_ptsz,                                                          \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,  \
     unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,              \
     void** kernelParams),                                                                                       \
    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams),   \
    KARMA_LOOKUP("cuLaunchCooperativeKernel", 9000, 0, kPerThreadStream))                                        \
  /* ---- driver API: 1D copies and memsets, legacy and per-thread default stream ---- */                       \
  X(kDriver, CUresult, cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount),                          \
    (dst, src, ByteCount), KARMA_LOOKUP("cuMemcpy", 4000, 0, kLegacyStream))                                    \
  X(kDriver, CUresult, cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount),                     \
    (dst, src, ByteCount), KARMA_LOOKUP("cuMemcpy", 7000, 0, kPerThreadStream))                                 \
  X(kDriver, CUresult, cuMemcpyHtoD_v2, (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount),         \
    (dstDevice, srcHost, ByteCount), KARMA_LOOKUP("cuMemcpyHtoD", 3020, 0, kLegacyStream))                      \
  X(kDriver, CUresult, cuMemcpyHtoD_v2_ptds, (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount),    \
    (dstDevice, srcHost, ByteCount), KARMA_LOOKUP("cuMemcpyHtoD", 7000, 0, kPerThreadStream))                   \
  X(kDriver, CUresult, cuMemcpyDtoH_v2, (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount),               \
    (dstHost, srcDevice, ByteCount), KARMA_LOOKUP("cuMemcpyDtoH", 3020, 0, kLegacyStream))                      \
  X(kDriver, CUresult, cuMemcpyDtoH_v2_ptds, (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount),          \
    (dstHost, srcDevice, ByteCount), KARMA_LOOKUP("cuMemcpyDtoH", 7000, 0, kPerThreadStream))                   \
  X(kDriver, CUresult, cuMemcpyDtoD_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),       \
    (dstDevice, srcDevice, ByteCount), KARMA_LOOKUP("cuMemcpyDtoD", 3020, 0, kLegacyStream))                    \
  X(kDriver, CUresult, cuMemcpyDtoD_v2_ptds, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),  \
    (dstDevice, srcDevice, ByteCount), KARMA_LOOKUP("cuMemcpyDtoD", 7000, 0, kPerThreadStream))                 \
  X(kDriver, CUresult, cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),   \
    (dst, src, ByteCount, hStream), KARMA_LOOKUP("cuMemcpyAsync", 4000, 0, kLegacyStream))                      \
  X(kDriver, CUresult, cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,                 \
     CUstream hStream),                                                                                         \
    (dst, src, ByteCount, hStream), KARMA_LOOKUP("cuMemcpyAsync", 7000, 0, kPerThreadStream))                   \
  X(kDriver, CUresult, cuMemcpyHtoDAsync_v2, (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,     \
     CUstream hStream),                                                                                         \
    (dstDevice, srcHost, ByteCount, hStream), KARMA_LOOKUP("cuMemcpyHtoDAsync", 3020, 0, kLegacyStream))        \
  X(kDriver, CUresult, cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dstDevice, const void* srcHost,                  \
     size_t ByteCount, CUstream hStream),                                                                       \
    (dstDevice, srcHost, ByteCount, hStream), KARMA_LOOKUP("cuMemcpyHtoDAsync", 7000, 0, kPerThreadStream))     \
  X(kDriver, CUresult, cuMemcpyDtoHAsync_v2, (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,           \
     CUstream hStream),                                                                                         \
    (dstHost, srcDevice, ByteCount, hStream), KARMA_LOOKUP("cuMemcpyDtoHAsync", 3020, 0, kLegacyStream))        \
  X(kDriver, CUresult, cuMemcpyDtoHAsync_v2_ptsz, (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,      \
     CUstream hStream),                                                                                         \
    (dstHost, srcDevice, ByteCount, hStream), KARMA_LOOKUP("cuMemcpyDtoHAsync", 7000, 0, kPerThreadStream))     \
  X(kDriver, CUresult, cuMemcpyDtoDAsync_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,   \
     CUstream hStream),                                                                                         \
    (dstDevice, srcDevice, ByteCount, hStream), KARMA_LOOKUP("cuMemcpyDtoDAsync", 3020, 0, kLegacyStream))      \
  X(kDriver, CUresult, cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dstDevice, CUdeviceptr srcDevice,                \
     size_t ByteCount, CUstream hStream),                                                                       \
    (dstDevice, srcDevice, ByteCount, hStream), KARMA_LOOKUP("cuMemcpyDtoDAsync", 7000, 0, kPerThreadStream))   \
  X(kDriver, CUresult, cuMemsetD8_v2, (CUdeviceptr dstDevice, unsigned char uc, size_t N),                      \
    (dstDevice, uc, N), KARMA_LOOKUP("cuMemsetD8", 3020, 0, kLegacyStream))                                     \
  X(kDriver, CUresult, cuMemsetD8_v2_ptds, (CUdeviceptr dstDevice, unsigned char uc, size_t N),                 \
    (dstDevice, uc, N), KARMA_LOOKUP("cuMemsetD8", 7000, 0, kPerThreadStream))                                  \
  X(kDriver, CUresult, cuMemsetD16_v2, (CUdeviceptr dstDevice, unsigned short us, size_t N),                    \
    (dstDevice, us, N), KARMA_LOOKUP("cuMemsetD16", 3020, 0, kLegacyStream))                                    \
  X(kDriver, CUresult, cuMemsetD16_v2_ptds, (CUdeviceptr dstDevice, unsigned short us, size_t N),               \
    (dstDevice, us, N), KARMA_LOOKUP("cuMemsetD16", 7000, 0, kPerThreadStream))                                 \
  X(kDriver, CUresult, cuMemsetD32_v2, (CUdeviceptr dstDevice, unsigned int ui, size_t N),                      \
    (dstDevice, ui, N), KARMA_LOOKUP("cuMemsetD32", 3020, 0, kLegacyStream))                                    \
  X(kDriver, CUresult, cuMemsetD32_v2_ptds, (CUdeviceptr dstDevice, unsigned int ui, size_t N),                 \
    (dstDevice, ui, N), KARMA_LOOKUP("cuMemsetD32", 7000, 0, kPerThreadStream))                                 \
  X(kDriver, CUresult, cuMemsetD8Async, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),  \
    (dstDevice, uc, N, hStream), KARMA_LOOKUP("cuMemsetD8Async", 3020, 0, kLegacyStream))                       \
  X(kDriver, CUresult, cuMemsetD8Async_ptsz, (CUdeviceptr dstDevice, unsigned char uc, size_t N,                \
     CUstream hStream),                                                                                         \
    (dstDevice, uc, N, hStream), KARMA_LOOKUP("cuMemsetD8Async", 7000, 0, kPerThreadStream))                    \
  X(kDriver, CUresult, cuMemsetD16Async, (CUdeviceptr dstDevice, unsigned short us, size_t N,                   \
     CUstream hStream),                                                                                         \
    (dstDevice, us, N, hStream), KARMA_LOOKUP("cuMemsetD16Async", 3020, 0, kLegacyStream))                      \
  X(kDriver, CUresult, cuMemsetD16Async_ptsz, (CUdeviceptr dstDevice, unsigned short us, size_t N,              \
     CUstream hStream),                                                                                         \
    (dstDevice, us, N, hStream), KARMA_LOOKUP("cuMemsetD16Async", 7000, 0, kPerThreadStream))                   \
  X(kDriver, CUresult, cuMemsetD32Async, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),  \
    (dstDevice, ui, N, hStream), KARMA_LOOKUP("cuMemsetD32Async", 3020, 0, kLegacyStream))                      \
  X(kDriver, CUresult, cuMemsetD32Async_ptsz, (CUdeviceptr dstDevice, unsigned int ui, size_t N,                \
     CUstream hStream),                                                                                         \
    (dstDevice, ui, N, hStream), KARMA_LOOKUP("cuMemsetD32Async", 7000, 0, kPerThreadStream))                   \
  X(kDriver, CUresult, cuMemcpyBatchAsync,                                                                      \
    (CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,              \
     size_t* attrsIdxs, size_t numAttrs, size_t* failIdx, CUstream hStream),                                    \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream),                                   \
    KARMA_LOOKUP("cuMemcpyBatchAsync", 12080, 13000, kLegacyStream))                                            \
  X(kDriver, CUresult, cuMemcpyBatchAsync_ptsz,                                                                 \
    (CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,              \
     size_t* attrsIdxs, size_t numAttrs, size_t* failIdx, CUstream hStream),                                    \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream),                                   \
    KARMA_LOOKUP("cuMemcpyBatchAsync", 12080, 13000, kPerThreadStream))                                         \
  X(kDriver, CUresult, cuMemcpyBatchAsync_v2,                                                                   \
    (CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,              \
     size_t* attrsIdxs, size_t numAttrs, CUstream hStream),                                                     \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream),                                            \
    KARMA_LOOKUP("cuMemcpyBatchAsync", 13000, 0, kLegacyStream))                                                \
  X(kDriver, CUresult, cuMemcpyBatchAsync_v2_ptsz,                                                              \
    (CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,              \
     size_t* attrsIdxs, size_t numAttrs, CUstream hStream),                                                     \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream),                                            \
    KARMA_LOOKUP("cuMemcpyBatchAsync", 13000, 0, kPerThreadStream))                                             \
  X(kDriver, CUresult, cuGetProcAddress, (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags),   \
    (symbol, pfn, cudaVersion, flags), KARMA_LOOKUP("cuGetProcAddress", 11030, 12000, kAnyStream))               \
  X(kDriver, CUresult, cuGetProcAddress_v2,                                                                     \
    (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,                                          \
     CUdriverProcAddressQueryResult* symbolStatus),                                                              \
    (symbol, pfn, cudaVersion, flags, symbolStatus), KARMA_LOOKUP("cuGetProcAddress", 12000, 0, kAnyStream))     \
  /* ---- cuBLAS: exact operands from the pointer arguments ---- */                                             \
  X(kCublas, cublasStatus_t, cublasSgemm_v2,                                                                    \
    (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,             \
     const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta, float* C, int ldc), \
    (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc), KARMA_NO_LOOKUP)                     \
  X(kCublas, cublasStatus_t, cublasSgemmStridedBatched,                                                         \
    (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,             \
     const float* alpha, const float* A, int lda, long long int strideA, const float* B, int ldb,                \
     long long int strideB, const float* beta, float* C, int ldc, long long int strideC, int batchCount),        \
    (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,            \
     batchCount),                                                                                                \
    KARMA_NO_LOOKUP)                                                                                             \
  X(kCublas, cublasStatus_t, cublasGemmEx,                                                                      \
    (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,             \
     const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B, cudaDataType Btype, int ldb,  \
     const void* beta, void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,                    \
     cublasGemmAlgo_t algo),                                                                                     \
    (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType,     \
     algo),                                                                                                      \
    KARMA_NO_LOOKUP)                                                                                             \
  /* ---- cuDNN: convolutions (legacy API) and the backend graph API ---- */                                    \
  X(kCudnn, cudnnStatus_t, cudnnConvolutionForward,                                                             \
    (cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xDesc, const void* x,                \
     const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,            \
     cudnnConvolutionFwdAlgo_t algo, void* workSpace, size_t workSpaceSizeInBytes, const void* beta,             \
     const cudnnTensorDescriptor_t yDesc, void* y),                                                              \
    (handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, yDesc, y),        \
    KARMA_NO_LOOKUP)                                                                                             \
  X(kCudnn, cudnnStatus_t, cudnnConvolutionBackwardData,                                                        \
    (cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t wDesc, const void* w,                \
     const cudnnTensorDescriptor_t dyDesc, const void* dy, const cudnnConvolutionDescriptor_t convDesc,          \
     cudnnConvolutionBwdDataAlgo_t algo, void* workSpace, size_t workSpaceSizeInBytes, const void* beta,         \
     const cudnnTensorDescriptor_t dxDesc, void* dx),                                                            \
    (handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dxDesc, dx),    \
    KARMA_NO_LOOKUP)                                                                                             \
  X(kCudnn, cudnnStatus_t, cudnnConvolutionBackwardFilter,                                                      \
    (cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xDesc, const void* x,                \
     const cudnnTensorDescriptor_t dyDesc, const void* dy, const cudnnConvolutionDescriptor_t convDesc,          \
     cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace, size_t workSpaceSizeInBytes, const void* beta,       \
     const cudnnFilterDescriptor_t dwDesc, void* dw),                                                            \
    (handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dwDesc, dw),    \
    KARMA_NO_LOOKUP)                                                                                             \
  X(kCudnn, cudnnStatus_t, cudnnBackendExecute,                                                                 \
    (cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan, cudnnBackendDescriptor_t variantPack),        \
    (handle, executionPlan, variantPack), KARMA_NO_LOOKUP)                                                       \
  /* ---- NVTX (applications linked against libnvToolsExt; NVTX3 header-only users come through the           \
     injection interface, NVTX_INJECTION64_PATH=libkarma.so) ---- */                                          \
  X(kNvtx, int, nvtxRangePushA, (const char* message), (message), KARMA_NO_LOOKUP)                             \
  X(kNvtx, int, nvtxRangePop, (), (), KARMA_NO_LOOKUP)

// The public C API (include/karma/karma.h) and the NVTX injection entry point, exported besides the hooks.
#define KARMA_PUBLIC_API(X) \
  X(karma_iteration_begin)  \
  X(karma_version)          \
  X(InitializeInjectionNvtx2)
