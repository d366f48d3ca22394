// Hook handlers for kernel launches, copies, memsets, synchronization, streams, events, graph capture and NVTX
// ranges: each op is shown to the session before its real call and closed after it.
#include "interpose/hooks.h"
#include "runtime/session/hook_util.h"

namespace karma::hook {
namespace {

using rt::Access;
using rt::AddressOf;
using rt::OpDesc;
using rt::Session;
using rt::StreamKey;

OpDesc Kernel(const void* func, bool driver, const uint32_t grid[3], const uint32_t block[3], void** args,
              void** extra, StreamKey stream) {
  OpDesc d;
  d.kind = trace::OpKind::kKernel;
  d.func = func;
  d.driver = driver;
  for (int i = 0; i < 3; ++i) {
    d.grid[i] = grid[i];
    d.block[i] = block[i];
  }
  d.args = args;
  d.extra = extra;
  d.stream = stream;
  return d;
}

// A launch the executor may issue again for a recompute: the plain forms, with parameters by pointer.
OpDesc Relaunchable(OpDesc d, rt::LaunchApi api, const void* real, size_t shared_bytes) {
  if (d.extra == nullptr && shared_bytes <= UINT32_MAX) {
    d.launch_api = api;
    d.launch_real = real;
    d.shared_bytes = static_cast<uint32_t>(shared_bytes);
  }
  return d;
}

const char* CopyName(cudaMemcpyKind kind, bool two_d) {
  switch (kind) {
    case cudaMemcpyHostToDevice: return two_d ? "memcpy2D HtoD" : "memcpy HtoD";
    case cudaMemcpyDeviceToHost: return two_d ? "memcpy2D DtoH" : "memcpy DtoH";
    case cudaMemcpyDeviceToDevice: return two_d ? "memcpy2D DtoD" : "memcpy DtoD";
    case cudaMemcpyHostToHost: return two_d ? "memcpy2D HtoH" : "memcpy HtoH";
    default: return two_d ? "memcpy2D" : "memcpy";
  }
}

OpDesc Copy(uint64_t dst, uint64_t src, uint64_t bytes, cudaMemcpyKind kind, bool two_d, StreamKey stream) {
  OpDesc d;
  d.kind = trace::OpKind::kCopy;
  d.name = CopyName(kind, two_d);
  d.stream = stream;
  // 2D copies skip the pitch padding: their extent is not width x height, so it is left unknown.
  const uint64_t extent = two_d ? 0 : bytes;
  d.operands = {{src, Access::kRead, false, extent}, {dst, Access::kWrite, false, extent}};
  d.shape = rt::HashMix(bytes, static_cast<uint64_t>(kind));
  d.bytes = 2 * bytes;
  return d;
}

// A batch of copies (cudaMemcpyBatchAsync): one op that reads each source and writes each destination.
template <typename Dst, typename Src>
OpDesc BatchCopy(const Dst* dsts, const Src* srcs, const size_t* sizes, size_t count, StreamKey stream) {
  OpDesc d;
  d.kind = trace::OpKind::kCopy;
  d.name = "memcpy batch";
  d.stream = stream;
  d.shape = count;
  d.operands.reserve(2 * count);
  for (size_t i = 0; i < count; ++i) {
    d.operands.push_back({AddressOf(srcs[i]), Access::kRead, false, sizes[i]});
    d.operands.push_back({AddressOf(dsts[i]), Access::kWrite, false, sizes[i]});
    d.shape = rt::HashMix(d.shape, sizes[i]);
    d.bytes += 2 * sizes[i];
  }
  return d;
}

OpDesc Memset(uint64_t dst, uint64_t bytes, bool two_d, StreamKey stream) {
  OpDesc d;
  d.kind = trace::OpKind::kMemset;
  d.name = two_d ? "memset2D" : "memset";
  d.stream = stream;
  d.operands = {{dst, Access::kWrite, false, two_d ? 0 : bytes}};
  d.shape = bytes;
  d.bytes = bytes;
  return d;
}

}  // namespace

// ---- launches ----

namespace {

// The runtime's launches. A cudaKernel_t (what nvcc 13's <<<>>> launches with __cudaLaunchKernel) is accepted
// wherever a kernel's address is (cudaFuncGetParamInfo, cudaFuncGetName, cudaLaunchKernel: "If the specified
// function does not exist, then it is assumed to be a cudaKernel_t and used as is"), so the session treats the
// handle as the kernel's identity and a recompute relaunches it with the same entry point. `relaunch`: the real
// function a recompute or a run on copies may call again, or null. Only the legacy default-stream forms are
// relaunched, and never a cooperative launch: through the plain entry point its grid-wide synchronization breaks.
template <typename RealCall>
cudaError_t LaunchRuntime(const void* relaunch, const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                          StreamKey key, RealCall call) {
  Session* s = Session::Get();
  if (s == nullptr) return call();
  const uint32_t g[3] = {grid.x, grid.y, grid.z}, b[3] = {block.x, block.y, block.z};
  OpDesc d = Kernel(func, false, g, b, args, nullptr, key);
  if (relaunch != nullptr) d = Relaunchable(std::move(d), rt::LaunchApi::kRuntime, relaunch, shared);
  return rt::Observed(s, d, cudaSuccess, call);
}

template <typename Real>
cudaError_t LaunchRuntimeEx(Real real, const cudaLaunchConfig_t* config, const void* func, void** args,
                            bool per_thread) {
  Session* s = Session::Get();
  if (s == nullptr || config == nullptr) return real(config, func, args);
  const uint32_t g[3] = {config->gridDim.x, config->gridDim.y, config->gridDim.z};
  const uint32_t b[3] = {config->blockDim.x, config->blockDim.y, config->blockDim.z};
  const StreamKey key = per_thread ? rt::PerThreadKeyOf(config->stream) : rt::KeyOf(config->stream);
  return rt::Observed(s, Kernel(func, false, g, b, args, nullptr, key), cudaSuccess,
                      [&] { return real(config, func, args); });
}

}  // namespace

cudaError_t cudaLaunchKernel(cudaLaunchKernel_fn real, const void* func, dim3 gridDim, dim3 blockDim, void** args,
                             size_t sharedMem, cudaStream_t stream) {
  return LaunchRuntime(reinterpret_cast<const void*>(real), func, gridDim, blockDim, args, sharedMem,
                       rt::KeyOf(stream), [&] { return real(func, gridDim, blockDim, args, sharedMem, stream); });
}

cudaError_t cudaLaunchKernel_ptsz(cudaLaunchKernel_ptsz_fn real, const void* func, dim3 gridDim, dim3 blockDim,
                                  void** args, size_t sharedMem, cudaStream_t stream) {
  return LaunchRuntime(nullptr, func, gridDim, blockDim, args, sharedMem, rt::PerThreadKeyOf(stream),
                       [&] { return real(func, gridDim, blockDim, args, sharedMem, stream); });
}

cudaError_t __cudaLaunchKernel(__cudaLaunchKernel_fn real, cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                               void** args, size_t sharedMem, cudaStream_t stream) {
  return LaunchRuntime(reinterpret_cast<const void*>(real), kernel, gridDim, blockDim, args, sharedMem,
                       rt::KeyOf(stream), [&] { return real(kernel, gridDim, blockDim, args, sharedMem, stream); });
}

cudaError_t __cudaLaunchKernel_ptsz(__cudaLaunchKernel_ptsz_fn real, cudaKernel_t kernel, dim3 gridDim,
                                    dim3 blockDim, void** args, size_t sharedMem, cudaStream_t stream) {
  return LaunchRuntime(nullptr, kernel, gridDim, blockDim, args, sharedMem, rt::PerThreadKeyOf(stream),
                       [&] { return real(kernel, gridDim, blockDim, args, sharedMem, stream); });
}

cudaError_t cudaLaunchCooperativeKernel(cudaLaunchCooperativeKernel_fn real, const void* func, dim3 gridDim,
                                        dim3 blockDim, void** args, size_t sharedMem, cudaStream_t stream) {
  return LaunchRuntime(nullptr, func, gridDim, blockDim, args, sharedMem, rt::KeyOf(stream),
                       [&] { return real(func, gridDim, blockDim, args, sharedMem, stream); });
}

cudaError_t cudaLaunchCooperativeKernel_ptsz(cudaLaunchCooperativeKernel_ptsz_fn real, const void* func,
                                             dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                             cudaStream_t stream) {
  return LaunchRuntime(nullptr, func, gridDim, blockDim, args, sharedMem, rt::PerThreadKeyOf(stream),
                       [&] { return real(func, gridDim, blockDim, args, sharedMem, stream); });
}

cudaError_t cudaLaunchKernelExC(cudaLaunchKernelExC_fn real, const cudaLaunchConfig_t* config, const void* func,
                                void** args) {
  return LaunchRuntimeEx(real, config, func, args, false);
}

cudaError_t cudaLaunchKernelExC_ptsz(cudaLaunchKernelExC_ptsz_fn real, const cudaLaunchConfig_t* config,
                                     const void* func, void** args) {
  return LaunchRuntimeEx(real, config, func, args, true);
}

namespace {

// The driver's launches; `relaunch` as for LaunchRuntime (cuLaunchKernel's legacy form only).
template <typename RealCall>
CUresult LaunchDriver(const void* relaunch, CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                      unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem, void** params,
                      void** extra, StreamKey key, RealCall call) {
  Session* s = Session::Get();
  if (s == nullptr) return call();
  const uint32_t g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  OpDesc d = Kernel(f, true, g, b, params, extra, key);
  if (relaunch != nullptr) d = Relaunchable(std::move(d), rt::LaunchApi::kDriver, relaunch, shmem);
  return rt::Observed(s, d, CUDA_SUCCESS, call);
}

template <typename Real>
CUresult LaunchDriverEx(Real real, const CUlaunchConfig* config, CUfunction f, void** params, void** extra,
                        bool per_thread) {
  Session* s = Session::Get();
  if (s == nullptr || config == nullptr) return real(config, f, params, extra);
  const uint32_t g[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  const uint32_t b[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  const StreamKey key = per_thread ? rt::PerThreadKeyOf(config->hStream) : rt::KeyOf(config->hStream);
  return rt::Observed(s, Kernel(f, true, g, b, params, extra, key), CUDA_SUCCESS,
                            [&] { return real(config, f, params, extra); });
}

}  // namespace

CUresult cuLaunchKernel(cuLaunchKernel_fn real, CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  return LaunchDriver(reinterpret_cast<const void*>(real), f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                      blockDimZ, sharedMemBytes, kernelParams, extra, rt::KeyOf(hStream), [&] {
                        return real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                                    hStream, kernelParams, extra);
                      });
}

CUresult cuLaunchKernel_ptsz(cuLaunchKernel_ptsz_fn real, CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                             void** kernelParams, void** extra) {
  return LaunchDriver(nullptr, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                      kernelParams, extra, rt::PerThreadKeyOf(hStream), [&] {
                        return real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                                    hStream, kernelParams, extra);
                      });
}

CUresult cuLaunchCooperativeKernel(cuLaunchCooperativeKernel_fn real, CUfunction f, unsigned int gridDimX,
                                   unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,
                                   CUstream hStream, void** kernelParams) {
  return LaunchDriver(nullptr, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                      kernelParams, nullptr, rt::KeyOf(hStream), [&] {
                        return real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                                    hStream, kernelParams);
                      });
}

CUresult cuLaunchCooperativeKernel_ptsz(cuLaunchCooperativeKernel_ptsz_fn real, CUfunction f, unsigned int gridDimX,
                                        unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
                                        unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,
                                        CUstream hStream, void** kernelParams) {
  return LaunchDriver(nullptr, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                      kernelParams, nullptr, rt::PerThreadKeyOf(hStream), [&] {
                        return real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                                    hStream, kernelParams);
                      });
}

CUresult cuLaunchKernelEx(cuLaunchKernelEx_fn real, const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                          void** extra) {
  return LaunchDriverEx(real, config, f, kernelParams, extra, false);
}

CUresult cuLaunchKernelEx_ptsz(cuLaunchKernelEx_ptsz_fn real, const CUlaunchConfig* config, CUfunction f,
                               void** kernelParams, void** extra) {
  return LaunchDriverEx(real, config, f, kernelParams, extra, true);
}

// ---- copies and memsets ----
// The runtime's and the driver's, with the legacy and the per-thread default stream: the same ops.

namespace {

// Pointers are the runtime's (void*) or the driver's (CUdeviceptr): AddressOf takes either.
template <typename Err, typename Dst, typename Src, typename Call>
Err CopyOp(Err ok, Dst dst, Src src, uint64_t bytes, cudaMemcpyKind kind, bool two_d, StreamKey stream, Call call) {
  Session* s = Session::Get();
  if (s == nullptr) return call();
  return rt::Observed(s, Copy(AddressOf(dst), AddressOf(src), bytes, kind, two_d, stream), ok, call);
}

template <typename Err, typename Dst, typename Call>
Err MemsetOp(Err ok, Dst dst, uint64_t bytes, bool two_d, StreamKey stream, Call call) {
  Session* s = Session::Get();
  if (s == nullptr) return call();
  return rt::Observed(s, Memset(AddressOf(dst), bytes, two_d, stream), ok, call);
}

// The synchronous calls' work goes to the default stream: the legacy one (key 0) or the calling thread's.
constexpr StreamKey kLegacyDefault = 0;
StreamKey PerThreadDefault() { return rt::PerThreadKeyOf(nullptr); }

}  // namespace

cudaError_t cudaMemcpy(cudaMemcpy_fn real, void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return CopyOp(cudaSuccess, dst, src, count, kind, false, kLegacyDefault, [&] { return real(dst, src, count, kind); });
}

cudaError_t cudaMemcpy_ptds(cudaMemcpy_ptds_fn real, void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return CopyOp(cudaSuccess, dst, src, count, kind, false, PerThreadDefault(),
                [&] { return real(dst, src, count, kind); });
}

cudaError_t cudaMemcpyAsync(cudaMemcpyAsync_fn real, void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return CopyOp(cudaSuccess, dst, src, count, kind, false, rt::KeyOf(stream),
                [&] { return real(dst, src, count, kind, stream); });
}

cudaError_t cudaMemcpyAsync_ptsz(cudaMemcpyAsync_ptsz_fn real, void* dst, const void* src, size_t count,
                                 cudaMemcpyKind kind, cudaStream_t stream) {
  return CopyOp(cudaSuccess, dst, src, count, kind, false, rt::PerThreadKeyOf(stream),
                [&] { return real(dst, src, count, kind, stream); });
}

cudaError_t cudaMemcpy2D(cudaMemcpy2D_fn real, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind) {
  return CopyOp(cudaSuccess, dst, src, uint64_t{width} * height, kind, true, kLegacyDefault,
                [&] { return real(dst, dpitch, src, spitch, width, height, kind); });
}

cudaError_t cudaMemcpy2D_ptds(cudaMemcpy2D_ptds_fn real, void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind) {
  return CopyOp(cudaSuccess, dst, src, uint64_t{width} * height, kind, true, PerThreadDefault(),
                [&] { return real(dst, dpitch, src, spitch, width, height, kind); });
}

cudaError_t cudaMemcpy2DAsync(cudaMemcpy2DAsync_fn real, void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  return CopyOp(cudaSuccess, dst, src, uint64_t{width} * height, kind, true, rt::KeyOf(stream),
                [&] { return real(dst, dpitch, src, spitch, width, height, kind, stream); });
}

cudaError_t cudaMemcpy2DAsync_ptsz(cudaMemcpy2DAsync_ptsz_fn real, void* dst, size_t dpitch, const void* src,
                                   size_t spitch, size_t width, size_t height, cudaMemcpyKind kind,
                                   cudaStream_t stream) {
  return CopyOp(cudaSuccess, dst, src, uint64_t{width} * height, kind, true, rt::PerThreadKeyOf(stream),
                [&] { return real(dst, dpitch, src, spitch, width, height, kind, stream); });
}

cudaError_t cudaMemset(cudaMemset_fn real, void* devPtr, int value, size_t count) {
  return MemsetOp(cudaSuccess, devPtr, count, false, kLegacyDefault, [&] { return real(devPtr, value, count); });
}

cudaError_t cudaMemset_ptds(cudaMemset_ptds_fn real, void* devPtr, int value, size_t count) {
  return MemsetOp(cudaSuccess, devPtr, count, false, PerThreadDefault(), [&] { return real(devPtr, value, count); });
}

cudaError_t cudaMemsetAsync(cudaMemsetAsync_fn real, void* devPtr, int value, size_t count, cudaStream_t stream) {
  return MemsetOp(cudaSuccess, devPtr, count, false, rt::KeyOf(stream),
                  [&] { return real(devPtr, value, count, stream); });
}

cudaError_t cudaMemsetAsync_ptsz(cudaMemsetAsync_ptsz_fn real, void* devPtr, int value, size_t count,
                                 cudaStream_t stream) {
  return MemsetOp(cudaSuccess, devPtr, count, false, rt::PerThreadKeyOf(stream),
                  [&] { return real(devPtr, value, count, stream); });
}

cudaError_t cudaMemset2D(cudaMemset2D_fn real, void* devPtr, size_t pitch, int value, size_t width, size_t height) {
  return MemsetOp(cudaSuccess, devPtr, uint64_t{width} * height, true, kLegacyDefault,
                  [&] { return real(devPtr, pitch, value, width, height); });
}

cudaError_t cudaMemset2D_ptds(cudaMemset2D_ptds_fn real, void* devPtr, size_t pitch, int value, size_t width,
                              size_t height) {
  return MemsetOp(cudaSuccess, devPtr, uint64_t{width} * height, true, PerThreadDefault(),
                  [&] { return real(devPtr, pitch, value, width, height); });
}

cudaError_t cudaMemset2DAsync(cudaMemset2DAsync_fn real, void* devPtr, size_t pitch, int value, size_t width,
                              size_t height, cudaStream_t stream) {
  return MemsetOp(cudaSuccess, devPtr, uint64_t{width} * height, true, rt::KeyOf(stream),
                  [&] { return real(devPtr, pitch, value, width, height, stream); });
}

cudaError_t cudaMemset2DAsync_ptsz(cudaMemset2DAsync_ptsz_fn real, void* devPtr, size_t pitch, int value, size_t width,
                                   size_t height, cudaStream_t stream) {
  return MemsetOp(cudaSuccess, devPtr, uint64_t{width} * height, true, rt::PerThreadKeyOf(stream),
                  [&] { return real(devPtr, pitch, value, width, height, stream); });
}

// A batch: the operands are read from the caller's arrays before the call (which it may not change).
template <typename Err, typename Dst, typename Src, typename Call>
Err BatchOp(Err ok, const Dst* dsts, const Src* srcs, const size_t* sizes, size_t count, StreamKey stream, Call call) {
  Session* s = Session::Get();
  if (s == nullptr || dsts == nullptr || srcs == nullptr || sizes == nullptr) return call();
  return rt::Observed(s, BatchCopy(dsts, srcs, sizes, count, stream), ok, call);
}

cudaError_t cudaMemcpyBatchAsync(cudaMemcpyBatchAsync_fn real, void* const* dsts, const void* const* srcs,
                                 const size_t* sizes, size_t count, cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                 size_t numAttrs, cudaStream_t stream) {
  return BatchOp(cudaSuccess, dsts, srcs, sizes, count, rt::KeyOf(stream),
                 [&] { return real(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream); });
}

cudaError_t cudaMemcpyBatchAsync_ptsz(cudaMemcpyBatchAsync_ptsz_fn real, void* const* dsts, const void* const* srcs,
                                      const size_t* sizes, size_t count, cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                      size_t numAttrs, cudaStream_t stream) {
  return BatchOp(cudaSuccess, dsts, srcs, sizes, count, rt::PerThreadKeyOf(stream),
                 [&] { return real(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream); });
}

// The driver's batches: CUDA 12.8's ABI reports the failing copy's index (failIdx), 13.0's (_v2) does not.
CUresult cuMemcpyBatchAsync(cuMemcpyBatchAsync_fn real, CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                            size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                            size_t* failIdx, CUstream hStream) {
  return BatchOp(CUDA_SUCCESS, dsts, srcs, sizes, count, rt::KeyOf(hStream),
                 [&] { return real(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream); });
}

CUresult cuMemcpyBatchAsync_ptsz(cuMemcpyBatchAsync_ptsz_fn real, CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                 size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                 size_t* failIdx, CUstream hStream) {
  return BatchOp(CUDA_SUCCESS, dsts, srcs, sizes, count, rt::PerThreadKeyOf(hStream),
                 [&] { return real(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream); });
}

CUresult cuMemcpyBatchAsync_v2(cuMemcpyBatchAsync_v2_fn real, CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                               size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                               CUstream hStream) {
  return BatchOp(CUDA_SUCCESS, dsts, srcs, sizes, count, rt::KeyOf(hStream),
                 [&] { return real(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream); });
}

CUresult cuMemcpyBatchAsync_v2_ptsz(cuMemcpyBatchAsync_v2_ptsz_fn real, CUdeviceptr* dsts, CUdeviceptr* srcs,
                                    size_t* sizes, size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs,
                                    size_t numAttrs, CUstream hStream) {
  return BatchOp(CUDA_SUCCESS, dsts, srcs, sizes, count, rt::PerThreadKeyOf(hStream),
                 [&] { return real(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream); });
}

// The driver's: cuMemcpy and cuMemcpyAsync infer the direction from the addresses (unified addressing).

CUresult cuMemcpy(cuMemcpy_fn real, CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return CopyOp(CUDA_SUCCESS, dst, src, ByteCount, cudaMemcpyDefault, false, kLegacyDefault,
                [&] { return real(dst, src, ByteCount); });
}

CUresult cuMemcpy_ptds(cuMemcpy_ptds_fn real, CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return CopyOp(CUDA_SUCCESS, dst, src, ByteCount, cudaMemcpyDefault, false, PerThreadDefault(),
                [&] { return real(dst, src, ByteCount); });
}

CUresult cuMemcpyHtoD_v2(cuMemcpyHtoD_v2_fn real, CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return CopyOp(CUDA_SUCCESS, dstDevice, srcHost, ByteCount, cudaMemcpyHostToDevice, false, kLegacyDefault,
                [&] { return real(dstDevice, srcHost, ByteCount); });
}

CUresult cuMemcpyHtoD_v2_ptds(cuMemcpyHtoD_v2_ptds_fn real, CUdeviceptr dstDevice, const void* srcHost,
                              size_t ByteCount) {
  return CopyOp(CUDA_SUCCESS, dstDevice, srcHost, ByteCount, cudaMemcpyHostToDevice, false, PerThreadDefault(),
                [&] { return real(dstDevice, srcHost, ByteCount); });
}

CUresult cuMemcpyDtoH_v2(cuMemcpyDtoH_v2_fn real, void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return CopyOp(CUDA_SUCCESS, dstHost, srcDevice, ByteCount, cudaMemcpyDeviceToHost, false, kLegacyDefault,
                [&] { return real(dstHost, srcDevice, ByteCount); });
}

CUresult cuMemcpyDtoH_v2_ptds(cuMemcpyDtoH_v2_ptds_fn real, void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return CopyOp(CUDA_SUCCESS, dstHost, srcDevice, ByteCount, cudaMemcpyDeviceToHost, false, PerThreadDefault(),
                [&] { return real(dstHost, srcDevice, ByteCount); });
}

CUresult cuMemcpyDtoD_v2(cuMemcpyDtoD_v2_fn real, CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return CopyOp(CUDA_SUCCESS, dstDevice, srcDevice, ByteCount, cudaMemcpyDeviceToDevice, false, kLegacyDefault,
                [&] { return real(dstDevice, srcDevice, ByteCount); });
}

CUresult cuMemcpyDtoD_v2_ptds(cuMemcpyDtoD_v2_ptds_fn real, CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                              size_t ByteCount) {
  return CopyOp(CUDA_SUCCESS, dstDevice, srcDevice, ByteCount, cudaMemcpyDeviceToDevice, false, PerThreadDefault(),
                [&] { return real(dstDevice, srcDevice, ByteCount); });
}

CUresult cuMemcpyAsync(cuMemcpyAsync_fn real, CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return CopyOp(CUDA_SUCCESS, dst, src, ByteCount, cudaMemcpyDefault, false, rt::KeyOf(hStream),
                [&] { return real(dst, src, ByteCount, hStream); });
}

CUresult cuMemcpyAsync_ptsz(cuMemcpyAsync_ptsz_fn real, CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                            CUstream hStream) {
  return CopyOp(CUDA_SUCCESS, dst, src, ByteCount, cudaMemcpyDefault, false, rt::PerThreadKeyOf(hStream),
                [&] { return real(dst, src, ByteCount, hStream); });
}

CUresult cuMemcpyHtoDAsync_v2(cuMemcpyHtoDAsync_v2_fn real, CUdeviceptr dstDevice, const void* srcHost,
                              size_t ByteCount, CUstream hStream) {
  return CopyOp(CUDA_SUCCESS, dstDevice, srcHost, ByteCount, cudaMemcpyHostToDevice, false, rt::KeyOf(hStream),
                [&] { return real(dstDevice, srcHost, ByteCount, hStream); });
}

CUresult cuMemcpyHtoDAsync_v2_ptsz(cuMemcpyHtoDAsync_v2_ptsz_fn real, CUdeviceptr dstDevice, const void* srcHost,
                                   size_t ByteCount, CUstream hStream) {
  return CopyOp(CUDA_SUCCESS, dstDevice, srcHost, ByteCount, cudaMemcpyHostToDevice, false, rt::PerThreadKeyOf(hStream),
                [&] { return real(dstDevice, srcHost, ByteCount, hStream); });
}

CUresult cuMemcpyDtoHAsync_v2(cuMemcpyDtoHAsync_v2_fn real, void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream) {
  return CopyOp(CUDA_SUCCESS, dstHost, srcDevice, ByteCount, cudaMemcpyDeviceToHost, false, rt::KeyOf(hStream),
                [&] { return real(dstHost, srcDevice, ByteCount, hStream); });
}

CUresult cuMemcpyDtoHAsync_v2_ptsz(cuMemcpyDtoHAsync_v2_ptsz_fn real, void* dstHost, CUdeviceptr srcDevice,
                                   size_t ByteCount, CUstream hStream) {
  return CopyOp(CUDA_SUCCESS, dstHost, srcDevice, ByteCount, cudaMemcpyDeviceToHost, false, rt::PerThreadKeyOf(hStream),
                [&] { return real(dstHost, srcDevice, ByteCount, hStream); });
}

CUresult cuMemcpyDtoDAsync_v2(cuMemcpyDtoDAsync_v2_fn real, CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                              size_t ByteCount, CUstream hStream) {
  return CopyOp(CUDA_SUCCESS, dstDevice, srcDevice, ByteCount, cudaMemcpyDeviceToDevice, false, rt::KeyOf(hStream),
                [&] { return real(dstDevice, srcDevice, ByteCount, hStream); });
}

CUresult cuMemcpyDtoDAsync_v2_ptsz(cuMemcpyDtoDAsync_v2_ptsz_fn real, CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                   size_t ByteCount, CUstream hStream) {
  return CopyOp(CUDA_SUCCESS, dstDevice, srcDevice, ByteCount, cudaMemcpyDeviceToDevice, false,
                rt::PerThreadKeyOf(hStream), [&] { return real(dstDevice, srcDevice, ByteCount, hStream); });
}

CUresult cuMemsetD8_v2(cuMemsetD8_v2_fn real, CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, N, false, kLegacyDefault, [&] { return real(dstDevice, uc, N); });
}

CUresult cuMemsetD8_v2_ptds(cuMemsetD8_v2_ptds_fn real, CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, N, false, PerThreadDefault(), [&] { return real(dstDevice, uc, N); });
}

CUresult cuMemsetD8Async(cuMemsetD8Async_fn real, CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, N, false, rt::KeyOf(hStream),
                  [&] { return real(dstDevice, uc, N, hStream); });
}

CUresult cuMemsetD8Async_ptsz(cuMemsetD8Async_ptsz_fn real, CUdeviceptr dstDevice, unsigned char uc, size_t N,
                              CUstream hStream) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, N, false, rt::PerThreadKeyOf(hStream),
                  [&] { return real(dstDevice, uc, N, hStream); });
}

CUresult cuMemsetD16_v2(cuMemsetD16_v2_fn real, CUdeviceptr dstDevice, unsigned short us, size_t N) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, uint64_t{N} * 2, false, kLegacyDefault,
                  [&] { return real(dstDevice, us, N); });
}

CUresult cuMemsetD16_v2_ptds(cuMemsetD16_v2_ptds_fn real, CUdeviceptr dstDevice, unsigned short us, size_t N) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, uint64_t{N} * 2, false, PerThreadDefault(),
                  [&] { return real(dstDevice, us, N); });
}

CUresult cuMemsetD16Async(cuMemsetD16Async_fn real, CUdeviceptr dstDevice, unsigned short us, size_t N,
                          CUstream hStream) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, uint64_t{N} * 2, false, rt::KeyOf(hStream),
                  [&] { return real(dstDevice, us, N, hStream); });
}

CUresult cuMemsetD16Async_ptsz(cuMemsetD16Async_ptsz_fn real, CUdeviceptr dstDevice, unsigned short us, size_t N,
                               CUstream hStream) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, uint64_t{N} * 2, false, rt::PerThreadKeyOf(hStream),
                  [&] { return real(dstDevice, us, N, hStream); });
}

CUresult cuMemsetD32_v2(cuMemsetD32_v2_fn real, CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, uint64_t{N} * 4, false, kLegacyDefault,
                  [&] { return real(dstDevice, ui, N); });
}

CUresult cuMemsetD32_v2_ptds(cuMemsetD32_v2_ptds_fn real, CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, uint64_t{N} * 4, false, PerThreadDefault(),
                  [&] { return real(dstDevice, ui, N); });
}

CUresult cuMemsetD32Async(cuMemsetD32Async_fn real, CUdeviceptr dstDevice, unsigned int ui, size_t N,
                          CUstream hStream) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, uint64_t{N} * 4, false, rt::KeyOf(hStream),
                  [&] { return real(dstDevice, ui, N, hStream); });
}

CUresult cuMemsetD32Async_ptsz(cuMemsetD32Async_ptsz_fn real, CUdeviceptr dstDevice, unsigned int ui, size_t N,
                               CUstream hStream) {
  return MemsetOp(CUDA_SUCCESS, dstDevice, uint64_t{N} * 4, false, rt::PerThreadKeyOf(hStream),
                  [&] { return real(dstDevice, ui, N, hStream); });
}

// ---- synchronization: a host sync is where iterations usually end ----

cudaError_t cudaDeviceSynchronize(cudaDeviceSynchronize_fn real) {
  const cudaError_t e = real();
  if (Session* s = Session::Get()) s->OnSync();
  return e;
}

cudaError_t cudaStreamSynchronize(cudaStreamSynchronize_fn real, cudaStream_t stream) {
  const cudaError_t e = real(stream);
  if (Session* s = Session::Get()) s->OnSync();
  return e;
}

cudaError_t cudaEventSynchronize(cudaEventSynchronize_fn real, cudaEvent_t event) {
  const cudaError_t e = real(event);
  if (Session* s = Session::Get()) s->OnSync();
  return e;
}

// ---- streams and events: passed through. They are hooked because the replay executor (phase 2) orders its
// own streams against the application's with them. ----

cudaError_t cudaStreamCreate(cudaStreamCreate_fn real, cudaStream_t* pStream) { return real(pStream); }
cudaError_t cudaStreamCreateWithFlags(cudaStreamCreateWithFlags_fn real, cudaStream_t* pStream, unsigned int flags) {
  return real(pStream, flags);
}
cudaError_t cudaStreamCreateWithPriority(cudaStreamCreateWithPriority_fn real, cudaStream_t* pStream,
                                         unsigned int flags, int priority) {
  return real(pStream, flags, priority);
}
cudaError_t cudaStreamDestroy(cudaStreamDestroy_fn real, cudaStream_t stream) { return real(stream); }
cudaError_t cudaEventCreate(cudaEventCreate_fn real, cudaEvent_t* event) { return real(event); }
cudaError_t cudaEventCreateWithFlags(cudaEventCreateWithFlags_fn real, cudaEvent_t* event, unsigned int flags) {
  return real(event, flags);
}
cudaError_t cudaEventDestroy(cudaEventDestroy_fn real, cudaEvent_t event) { return real(event); }
cudaError_t cudaEventRecord(cudaEventRecord_fn real, cudaEvent_t event, cudaStream_t stream) {
  return real(event, stream);
}
cudaError_t cudaStreamWaitEvent(cudaStreamWaitEvent_fn real, cudaStream_t stream, cudaEvent_t event,
                                unsigned int flags) {
  return real(stream, event, flags);
}

// ---- graph capture: kernels captured into graphs run later, unseen; the arena stops reusing what is freed
// during a capture, and recording stops. ----

cudaError_t cudaStreamBeginCapture(cudaStreamBeginCapture_fn real, cudaStream_t stream, cudaStreamCaptureMode mode) {
  const cudaError_t e = real(stream, mode);
  Session* s = Session::Get();
  if (s != nullptr && e == cudaSuccess) s->OnCaptureBegin();
  return e;
}

cudaError_t cudaStreamBeginCaptureToGraph(cudaStreamBeginCaptureToGraph_fn real, cudaStream_t stream,
                                          cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                          const cudaGraphEdgeData* dependencyData, size_t numDependencies,
                                          cudaStreamCaptureMode mode) {
  const cudaError_t e = real(stream, graph, dependencies, dependencyData, numDependencies, mode);
  Session* s = Session::Get();
  if (s != nullptr && e == cudaSuccess) s->OnCaptureBegin();
  return e;
}

cudaError_t cudaStreamEndCapture(cudaStreamEndCapture_fn real, cudaStream_t stream, cudaGraph_t* pGraph) {
  const cudaError_t e = real(stream, pGraph);
  Session* s = Session::Get();
  // These mean the stream was not capturing; any other outcome (an invalidated capture too) ends one.
  const bool ended = e != cudaErrorIllegalState && e != cudaErrorInvalidValue && e != cudaErrorInvalidResourceHandle;
  if (s != nullptr && ended) s->OnCaptureEnd();
  return e;
}

// ---- NVTX ----

int nvtxRangePushA(nvtxRangePushA_fn real, const char* message) {
  if (Session* s = Session::Get()) s->OnRangePush(message);
  return real(message);
}

int nvtxRangePop(nvtxRangePop_fn real) { return real(); }

}  // namespace karma::hook
