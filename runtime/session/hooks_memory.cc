// Hook handlers for allocation, free and memory queries: device memory from the arena, everything else passed
// through and registered. Every path returns the error code the application would get without KARMA.
#include "interpose/hooks.h"
#include "runtime/session/session.h"

namespace karma::hook {
namespace {

using rt::Origin;
using rt::Session;
using rt::StreamKey;

uint64_t U(const void* p) { return reinterpret_cast<uint64_t>(p); }

// In the driver's _ptsz entry points the NULL stream is the calling thread's per-thread stream.
StreamKey PerThreadKey(CUstream s) { return s == nullptr ? 0x2 : rt::KeyOf(s); }

// A device allocation through the arena; `real` makes the real call when the arena passes the request on.
template <typename Err, typename RealCall>
Err Allocate(Session* s, uint64_t size, StreamKey stream, bool runtime_api, uint64_t* out, Err oom,
             RealCall real) {
  switch (s->AllocateDevice(size, stream, runtime_api, out)) {
    case Session::Served::kServed: return Err{};
    case Session::Served::kOutOfMemory: return oom;
    case Session::Served::kPassThrough: break;
  }
  const Err e = real();
  if (e == Err{}) s->NoteAllocation(*out, size, Origin::kDevice);
  return e;
}

template <typename Err, typename RealCall>
Err Free(Session* s, uint64_t addr, StreamKey stream, Err invalid, RealCall real) {
  switch (s->FreeDevice(addr, stream)) {
    case Session::Freed::kArena: return Err{};
    case Session::Freed::kInvalid: return invalid;
    case Session::Freed::kOther: break;
  }
  return real();
}

}  // namespace

// ---- CUDA runtime ----

cudaError_t cudaMalloc(cudaMalloc_fn real, void** devPtr, size_t size) {
  Session* s = Session::Get();
  if (s == nullptr || devPtr == nullptr || size == 0) return real(devPtr, size);
  uint64_t addr = 0;
  const cudaError_t e = Allocate(s, size, rt::kSyncStream, true, &addr, cudaErrorMemoryAllocation, [&] {
    const cudaError_t r = real(devPtr, size);
    if (r == cudaSuccess) addr = U(*devPtr);
    return r;
  });
  if (e == cudaSuccess) *devPtr = reinterpret_cast<void*>(addr);
  return e;
}

cudaError_t cudaFree(cudaFree_fn real, void* devPtr) {
  Session* s = Session::Get();
  if (s == nullptr || devPtr == nullptr) return real(devPtr);
  return Free(s, U(devPtr), rt::kSyncStream, cudaErrorInvalidValue, [&] { return real(devPtr); });
}

cudaError_t cudaMallocAsync(cudaMallocAsync_fn real, void** devPtr, size_t size, cudaStream_t hStream) {
  Session* s = Session::Get();
  if (s == nullptr || devPtr == nullptr || size == 0) return real(devPtr, size, hStream);
  uint64_t addr = 0;
  const cudaError_t e = Allocate(s, size, rt::KeyOf(hStream), true, &addr, cudaErrorMemoryAllocation, [&] {
    const cudaError_t r = real(devPtr, size, hStream);
    if (r == cudaSuccess) addr = U(*devPtr);
    return r;
  });
  if (e == cudaSuccess) *devPtr = reinterpret_cast<void*>(addr);
  return e;
}

cudaError_t cudaFreeAsync(cudaFreeAsync_fn real, void* devPtr, cudaStream_t hStream) {
  Session* s = Session::Get();
  if (s == nullptr || devPtr == nullptr) return real(devPtr, hStream);
  return Free(s, U(devPtr), rt::KeyOf(hStream), cudaErrorInvalidValue, [&] { return real(devPtr, hStream); });
}

// Explicit pools exist for sharing (IPC export) and special placement: never virtualized, only registered.
cudaError_t cudaMallocFromPoolAsync(cudaMallocFromPoolAsync_fn real, void** ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream) {
  const cudaError_t e = real(ptr, size, memPool, stream);
  Session* s = Session::Get();
  if (s != nullptr && e == cudaSuccess && ptr != nullptr && size != 0) s->NoteAllocation(U(*ptr), size, Origin::kDevice);
  return e;
}

cudaError_t cudaMallocManaged(cudaMallocManaged_fn real, void** devPtr, size_t size, unsigned int flags) {
  const cudaError_t e = real(devPtr, size, flags);
  Session* s = Session::Get();
  if (s != nullptr && e == cudaSuccess && devPtr != nullptr && size != 0) {
    s->NoteAllocation(U(*devPtr), size, Origin::kAppManaged);
  }
  return e;
}

cudaError_t cudaMallocHost(cudaMallocHost_fn real, void** ptr, size_t size) {
  const cudaError_t e = real(ptr, size);
  Session* s = Session::Get();
  if (s != nullptr && e == cudaSuccess && ptr != nullptr && size != 0) s->NoteAllocation(U(*ptr), size, Origin::kHostPinned);
  return e;
}

cudaError_t cudaHostAlloc(cudaHostAlloc_fn real, void** pHost, size_t size, unsigned int flags) {
  const cudaError_t e = real(pHost, size, flags);
  Session* s = Session::Get();
  if (s != nullptr && e == cudaSuccess && pHost != nullptr && size != 0) {
    s->NoteAllocation(U(*pHost), size, Origin::kHostPinned);
  }
  return e;
}

cudaError_t cudaFreeHost(cudaFreeHost_fn real, void* ptr) {
  Session* s = Session::Get();
  if (s == nullptr || ptr == nullptr) return real(ptr);
  return Free(s, U(ptr), rt::kSyncStream, cudaErrorInvalidValue, [&] { return real(ptr); });
}

cudaError_t cudaMemGetInfo(cudaMemGetInfo_fn real, size_t* free, size_t* total) {
  const cudaError_t e = real(free, total);
  Session* s = Session::Get();
  if (s != nullptr && e == cudaSuccess) s->AdjustMemInfo(free, total);
  return e;
}

// Arena blocks are managed memory underneath; the application asked for device memory and is told so.
cudaError_t cudaPointerGetAttributes(cudaPointerGetAttributes_fn real, cudaPointerAttributes* attributes,
                                     const void* ptr) {
  const cudaError_t e = real(attributes, ptr);
  Session* s = Session::Get();
  if (s != nullptr && e == cudaSuccess && attributes != nullptr && s->InArena(U(ptr))) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->hostPointer = nullptr;
    attributes->devicePointer = const_cast<void*>(ptr);
  }
  return e;
}

// ---- driver API ----

CUresult cuMemAlloc_v2(cuMemAlloc_v2_fn real, CUdeviceptr* dptr, size_t bytesize) {
  Session* s = Session::Get();
  if (s == nullptr || dptr == nullptr || bytesize == 0) return real(dptr, bytesize);
  uint64_t addr = 0;
  const CUresult e = Allocate(s, bytesize, rt::kSyncStream, false, &addr, CUDA_ERROR_OUT_OF_MEMORY, [&] {
    const CUresult r = real(dptr, bytesize);
    if (r == CUDA_SUCCESS) addr = *dptr;
    return r;
  });
  if (e == CUDA_SUCCESS) *dptr = addr;
  return e;
}

CUresult cuMemFree_v2(cuMemFree_v2_fn real, CUdeviceptr dptr) {
  Session* s = Session::Get();
  if (s == nullptr || dptr == 0) return real(dptr);
  return Free(s, dptr, rt::kSyncStream, CUDA_ERROR_INVALID_VALUE, [&] { return real(dptr); });
}

namespace {

template <typename Real>
CUresult AllocAsync(Real real, CUdeviceptr* dptr, size_t bytesize, CUstream hStream, StreamKey key) {
  Session* s = Session::Get();
  if (s == nullptr || dptr == nullptr || bytesize == 0) return real(dptr, bytesize, hStream);
  uint64_t addr = 0;
  const CUresult e = Allocate(s, bytesize, key, false, &addr, CUDA_ERROR_OUT_OF_MEMORY, [&] {
    const CUresult r = real(dptr, bytesize, hStream);
    if (r == CUDA_SUCCESS) addr = *dptr;
    return r;
  });
  if (e == CUDA_SUCCESS) *dptr = addr;
  return e;
}

template <typename Real>
CUresult FreeAsync(Real real, CUdeviceptr dptr, CUstream hStream, StreamKey key) {
  Session* s = Session::Get();
  if (s == nullptr || dptr == 0) return real(dptr, hStream);
  return Free(s, dptr, key, CUDA_ERROR_INVALID_VALUE, [&] { return real(dptr, hStream); });
}

}  // namespace

CUresult cuMemAllocAsync(cuMemAllocAsync_fn real, CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return AllocAsync(real, dptr, bytesize, hStream, rt::KeyOf(hStream));
}

CUresult cuMemAllocAsync_ptsz(cuMemAllocAsync_ptsz_fn real, CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return AllocAsync(real, dptr, bytesize, hStream, PerThreadKey(hStream));
}

CUresult cuMemFreeAsync(cuMemFreeAsync_fn real, CUdeviceptr dptr, CUstream hStream) {
  return FreeAsync(real, dptr, hStream, rt::KeyOf(hStream));
}

CUresult cuMemFreeAsync_ptsz(cuMemFreeAsync_ptsz_fn real, CUdeviceptr dptr, CUstream hStream) {
  return FreeAsync(real, dptr, hStream, PerThreadKey(hStream));
}

CUresult cuMemAllocManaged(cuMemAllocManaged_fn real, CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  const CUresult e = real(dptr, bytesize, flags);
  Session* s = Session::Get();
  if (s != nullptr && e == CUDA_SUCCESS && dptr != nullptr && bytesize != 0) {
    s->NoteAllocation(*dptr, bytesize, Origin::kAppManaged);
  }
  return e;
}

CUresult cuMemGetInfo_v2(cuMemGetInfo_v2_fn real, size_t* free, size_t* total) {
  const CUresult e = real(free, total);
  Session* s = Session::Get();
  if (s != nullptr && e == CUDA_SUCCESS) s->AdjustMemInfo(free, total);
  return e;
}

}  // namespace karma::hook
