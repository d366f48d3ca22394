// Shared by libcuda.so.1's sources: the runtime error to driver error mapping and the device every call uses.
#pragma once

#include <cuda.h>

#include "api/process.h"

namespace simcuda {

inline CUresult ToCu(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return CUDA_SUCCESS;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidMemcpyDirection: return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorMemoryAllocation: return CUDA_ERROR_OUT_OF_MEMORY;
    case cudaErrorInvalidDevice: return CUDA_ERROR_INVALID_DEVICE;
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDeviceFunction: return CUDA_ERROR_INVALID_HANDLE;
    case cudaErrorNotReady: return CUDA_ERROR_NOT_READY;
    case cudaErrorNoDevice: return CUDA_ERROR_NO_DEVICE;
    case cudaErrorNotSupported: return CUDA_ERROR_NOT_SUPPORTED;
    case cudaErrorIllegalAddress: return CUDA_ERROR_ILLEGAL_ADDRESS;
    case cudaErrorLaunchTimeout: return CUDA_ERROR_LAUNCH_TIMEOUT;
    case cudaErrorHostMemoryAlreadyRegistered: return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    case cudaErrorHostMemoryNotRegistered: return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    default: return CUDA_ERROR_UNKNOWN;
  }
}

inline void* Ptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

// The stream a _ptsz entry point's work goes to: a null stream is the calling thread's.
inline CUstream PerThread(CUstream s) { return s == nullptr ? CU_STREAM_PER_THREAD : s; }

}  // namespace simcuda

#define SIMCUDA_DEVICE(d)                 \
  simcuda::Device* d = simcuda::Global(); \
  if (d == nullptr) return CUDA_ERROR_NO_DEVICE
