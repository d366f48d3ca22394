// Hook handlers for allocation, free and memory queries: device memory from the arena, everything else passed
// through and registered. Every path returns the error code the application would get without KARMA.
#include "interpose/hooks.h"
#include "runtime/session/hook_util.h"

namespace karma::hook {
namespace {

using rt::AddressOf;
using rt::Origin;
using rt::Session;
using rt::StreamKey;

template <typename Out>
Out FromAddress(uint64_t a) {
  if constexpr (std::is_pointer_v<Out>) {
    return reinterpret_cast<Out>(a);
  } else {
    return static_cast<Out>(a);
  }
}

// A device allocation (runtime or driver API): the arena, or the real call when the arena passes it on.
template <typename Out, typename Err, typename RealCall>
Err Allocate(Out* out, size_t size, StreamKey stream, Err oom, RealCall real) {
  constexpr bool runtime_api = std::is_same_v<Err, cudaError_t>;
  Session* s = Session::Get();
  if (s == nullptr || out == nullptr || size == 0) return real();
  uint64_t addr = 0;
  switch (s->AllocateDevice(size, stream, runtime_api, &addr)) {
    case Session::Served::kServed:
      *out = FromAddress<Out>(addr);
      return Err{};
    case Session::Served::kOutOfMemory: return oom;
    case Session::Served::kPassThrough: break;
  }
  const Err e = real();
  if (e == Err{}) s->NoteAllocation(AddressOf(*out), size, Origin::kDevice);
  return e;
}

// A free: the arena's blocks never reach the real free; a double free gets `invalid`, as it would.
template <typename Err, typename RealCall>
Err Free(uint64_t addr, StreamKey stream, Err invalid, RealCall real) {
  Session* s = Session::Get();
  if (s == nullptr || addr == 0) return real();
  switch (s->FreeDevice(addr, stream)) {
    case Session::Freed::kArena: return Err{};
    case Session::Freed::kInvalid: return invalid;
    case Session::Freed::kOther: break;
  }
  return real();
}

// Memory the real call allocates and KARMA must not virtualize: registered so that recordings know it.
template <typename Out, typename Err, typename RealCall>
Err Register(Out* out, size_t size, Origin origin, RealCall real) {
  const Err e = real();
  Session* s = Session::Get();
  if (s != nullptr && e == Err{} && out != nullptr && size != 0) s->NoteAllocation(AddressOf(*out), size, origin);
  return e;
}

template <typename Err, typename RealCall>
Err MemInfo(size_t* free, size_t* total, RealCall real) {
  const Err e = real();
  Session* s = Session::Get();
  if (s != nullptr && e == Err{}) s->AdjustMemInfo(free, total);
  return e;
}

}  // namespace

// ---- CUDA runtime ----

cudaError_t cudaMalloc(cudaMalloc_fn real, void** devPtr, size_t size) {
  return Allocate(devPtr, size, rt::kSyncStream, cudaErrorMemoryAllocation, [&] { return real(devPtr, size); });
}

cudaError_t cudaFree(cudaFree_fn real, void* devPtr) {
  return Free(AddressOf(devPtr), rt::kSyncStream, cudaErrorInvalidValue, [&] { return real(devPtr); });
}

cudaError_t cudaMallocAsync(cudaMallocAsync_fn real, void** devPtr, size_t size, cudaStream_t hStream) {
  return Allocate(devPtr, size, rt::KeyOf(hStream), cudaErrorMemoryAllocation,
                  [&] { return real(devPtr, size, hStream); });
}

cudaError_t cudaFreeAsync(cudaFreeAsync_fn real, void* devPtr, cudaStream_t hStream) {
  return Free(AddressOf(devPtr), rt::KeyOf(hStream), cudaErrorInvalidValue, [&] { return real(devPtr, hStream); });
}

// Explicit pools exist for sharing (IPC export) and special placement: never virtualized, only registered.
cudaError_t cudaMallocFromPoolAsync(cudaMallocFromPoolAsync_fn real, void** ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream) {
  return Register<void*, cudaError_t>(ptr, size, Origin::kDevice, [&] { return real(ptr, size, memPool, stream); });
}

cudaError_t cudaMallocManaged(cudaMallocManaged_fn real, void** devPtr, size_t size, unsigned int flags) {
  return Register<void*, cudaError_t>(devPtr, size, Origin::kAppManaged, [&] { return real(devPtr, size, flags); });
}

cudaError_t cudaMallocHost(cudaMallocHost_fn real, void** ptr, size_t size) {
  return Register<void*, cudaError_t>(ptr, size, Origin::kHostPinned, [&] { return real(ptr, size); });
}

cudaError_t cudaHostAlloc(cudaHostAlloc_fn real, void** pHost, size_t size, unsigned int flags) {
  return Register<void*, cudaError_t>(pHost, size, Origin::kHostPinned, [&] { return real(pHost, size, flags); });
}

cudaError_t cudaFreeHost(cudaFreeHost_fn real, void* ptr) {
  return Free(AddressOf(ptr), rt::kSyncStream, cudaErrorInvalidValue, [&] { return real(ptr); });
}

cudaError_t cudaMemGetInfo(cudaMemGetInfo_fn real, size_t* free, size_t* total) {
  return MemInfo<cudaError_t>(free, total, [&] { return real(free, total); });
}

// Arena blocks are managed memory or, on the copy path, addresses whose backing changes (device or host chunks,
// nothing for a moment); the application asked for device memory and is told so without asking the driver.
cudaError_t cudaPointerGetAttributes(cudaPointerGetAttributes_fn real, cudaPointerAttributes* attributes,
                                     const void* ptr) {
  Session* s = Session::Get();
  if (s != nullptr && attributes != nullptr && s->ArenaPointerAttributes(AddressOf(ptr), attributes)) {
    return cudaSuccess;
  }
  return real(attributes, ptr);
}

// ---- driver API ----

CUresult cuMemAlloc_v2(cuMemAlloc_v2_fn real, CUdeviceptr* dptr, size_t bytesize) {
  return Allocate(dptr, bytesize, rt::kSyncStream, CUDA_ERROR_OUT_OF_MEMORY, [&] { return real(dptr, bytesize); });
}

CUresult cuMemFree_v2(cuMemFree_v2_fn real, CUdeviceptr dptr) {
  return Free(dptr, rt::kSyncStream, CUDA_ERROR_INVALID_VALUE, [&] { return real(dptr); });
}

CUresult cuMemAllocAsync(cuMemAllocAsync_fn real, CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return Allocate(dptr, bytesize, rt::KeyOf(hStream), CUDA_ERROR_OUT_OF_MEMORY,
                  [&] { return real(dptr, bytesize, hStream); });
}

CUresult cuMemAllocAsync_ptsz(cuMemAllocAsync_ptsz_fn real, CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return Allocate(dptr, bytesize, rt::PerThreadKeyOf(hStream), CUDA_ERROR_OUT_OF_MEMORY,
                  [&] { return real(dptr, bytesize, hStream); });
}

CUresult cuMemFreeAsync(cuMemFreeAsync_fn real, CUdeviceptr dptr, CUstream hStream) {
  return Free(dptr, rt::KeyOf(hStream), CUDA_ERROR_INVALID_VALUE, [&] { return real(dptr, hStream); });
}

CUresult cuMemFreeAsync_ptsz(cuMemFreeAsync_ptsz_fn real, CUdeviceptr dptr, CUstream hStream) {
  return Free(dptr, rt::PerThreadKeyOf(hStream), CUDA_ERROR_INVALID_VALUE, [&] { return real(dptr, hStream); });
}

CUresult cuMemAllocManaged(cuMemAllocManaged_fn real, CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  return Register<CUdeviceptr, CUresult>(dptr, bytesize, Origin::kAppManaged,
                                         [&] { return real(dptr, bytesize, flags); });
}

CUresult cuMemGetInfo_v2(cuMemGetInfo_v2_fn real, size_t* free, size_t* total) {
  return MemInfo<CUresult>(free, total, [&] { return real(free, total); });
}

}  // namespace karma::hook
