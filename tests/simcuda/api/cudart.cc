// libcudart.so.13 on simcuda: the CUDA runtime API subset, each call forwarded to the process-wide device.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstring>
#include <string>
#include <vector>

#include "api/process.h"
#include "simcuda/nvcc_entry_points.h"

namespace {

thread_local cudaError_t t_last_error = cudaSuccess;

// Every entry point returns through here so cudaGetLastError sees failures, as with the real runtime.
cudaError_t Ret(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

simcuda::Device* Dev() { return simcuda::Global(); }

#define SIMCUDA_DEVICE(d)                                 \
  simcuda::Device* d = Dev();                             \
  if (d == nullptr) return Ret(cudaErrorNoDevice)

cudaStream_t PerThreadStream(cudaStream_t s) { return s == nullptr ? cudaStreamPerThread : s; }

const CUfunc_st* Kernel(simcuda::Device* d, const void* func) {
  if (const CUfunc_st* fn = d->kernels().ByHostStub(func)) return fn;
  // A cudaFunction_t / cudaKernel_t handle is accepted wherever a kernel's address is.
  const auto* fn = static_cast<const CUfunc_st*>(func);
  return d->kernels().IsFunction(fn) ? fn : nullptr;
}

cudaError_t Launch(const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Launch(Kernel(d, func), {grid, block, shared}, args, stream));
}

// Launch attributes (clusters, priorities, programmatic serialization) do not change the model.
cudaError_t LaunchExC(const cudaLaunchConfig_t* config, const void* func, void** args, cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Launch(Kernel(d, func), {config->gridDim, config->blockDim, config->dynamicSmemBytes}, args, stream));
}

// One field of a stream's state into `out`.
template <typename T>
cudaError_t StreamField(cudaStream_t stream, T* out, T CUstream_st::*field) {
  simcuda::Device* d = Dev();
  if (d == nullptr) return Ret(cudaErrorNoDevice);
  if (out == nullptr) return Ret(cudaErrorInvalidValue);
  CUstream_st info;
  const cudaError_t e = d->StreamInfo(stream, &info);
  if (e == cudaSuccess) *out = info.*field;
  return Ret(e);
}

struct CallConfig {
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
};
thread_local std::vector<CallConfig> t_call_configs;

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorMissingConfiguration, "cudaErrorMissingConfiguration", "__global__ function call is not configured"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchTimeout, "cudaErrorLaunchTimeout", "the launch timed out and was terminated"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText* FindError(cudaError_t e) {
  for (const ErrorText& t : kErrors) {
    if (t.code == e) return &t;
  }
  return nullptr;
}

std::vector<simcuda::Range> Ranges(void** ptrs, const size_t* sizes, size_t count) {
  std::vector<simcuda::Range> ranges(count);
  for (size_t i = 0; i < count; ++i) ranges[i] = {reinterpret_cast<uintptr_t>(ptrs[i]), sizes[i]};
  return ranges;
}

// cudaMemPrefetchBatchAsync, and cudaMemDiscardAndPrefetchBatchAsync with `discard`.
cudaError_t PrefetchBatch(void** dptrs, const size_t* sizes, size_t count, const cudaMemLocation* locs,
                          const size_t* loc_starts, size_t num_locs, unsigned long long flags, cudaStream_t stream,
                          bool discard) {
  SIMCUDA_DEVICE(d);
  if (flags != 0 || dptrs == nullptr || sizes == nullptr || locs == nullptr || loc_starts == nullptr) {
    return Ret(cudaErrorInvalidValue);
  }
  return Ret(d->PrefetchBatch(Ranges(dptrs, sizes, count), {locs, num_locs}, {loc_starts, num_locs}, discard, stream));
}

// The driver library next to this one (simcuda's libcuda.so.1), as the real runtime loads libcuda.so.1.
using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
GetProcAddressFn DriverGetProcAddress() {
  static GetProcAddressFn fn = [] {
    Dl_info info{};
    std::string path = "libcuda.so.1";
    if (dladdr(reinterpret_cast<void*>(&DriverGetProcAddress), &info) != 0 && info.dli_fname != nullptr) {
      std::string self = info.dli_fname;
      const size_t slash = self.rfind('/');
      if (slash != std::string::npos) path = self.substr(0, slash + 1) + "libcuda.so.1";
    }
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    return lib == nullptr ? nullptr : reinterpret_cast<GetProcAddressFn>(dlsym(lib, "cuGetProcAddress_v2"));
  }();
  return fn;
}

}  // namespace

extern "C" {

// ---- device management ----------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Ret(cudaErrorInvalidValue);
  *count = Dev() != nullptr ? 1 : 0;
  return *count == 1 ? cudaSuccess : Ret(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Ret(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : Ret(cudaErrorInvalidDevice); }
cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) { return cudaSetDevice(device); }
cudaError_t cudaSetDeviceFlags(unsigned int) { return cudaSuccess; }

cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (flags == nullptr) return Ret(cudaErrorInvalidValue);
  *flags = cudaDeviceScheduleAuto | cudaDeviceMapHost;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  SIMCUDA_DEVICE(d);
  if (prop == nullptr) return Ret(cudaErrorInvalidValue);
  if (device != 0) return Ret(cudaErrorInvalidDevice);
  d->Properties(prop);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  SIMCUDA_DEVICE(d);
  if (device != 0) return Ret(cudaErrorInvalidDevice);
  return Ret(d->Attribute(value, attr));
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority != nullptr) *leastPriority = 0;
  if (greatestPriority != nullptr) *greatestPriority = -5;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Synchronize());
}

cudaError_t cudaDeviceReset(void) {
  // Allocations and streams survive: the simulated device has no context to tear down.
  return cudaDeviceSynchronize();
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return Ret(cudaErrorInvalidValue);
  *driverVersion = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (runtimeVersion == nullptr) return Ret(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  SIMCUDA_DEVICE(d);
  if (free == nullptr || total == nullptr) return Ret(cudaErrorInvalidValue);
  return Ret(d->MemGetInfo(free, total));
}

// ---- errors -------------------------------------------------------------------------------------------------

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* t = FindError(error);
  return t != nullptr ? t->name : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  const ErrorText* t = FindError(error);
  return t != nullptr ? t->text : "unrecognized error code";
}

// ---- memory -------------------------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Malloc(devPtr, size));
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->MallocAsync(devPtr, size, hStream));
}

cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  SIMCUDA_DEVICE(d);
  if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost) return Ret(cudaErrorInvalidValue);
  return Ret(d->MallocManaged(devPtr, size));
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  SIMCUDA_DEVICE(d);
  return Ret(d->MallocHost(ptr, size));
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int) {
  SIMCUDA_DEVICE(d);
  return Ret(d->MallocHost(pHost, size));
}

// Registration flags (portable, mapped, I/O memory, read-only) do not change the model: the range is pinned.
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int) {
  SIMCUDA_DEVICE(d);
  return Ret(d->HostRegister(ptr, size));
}

cudaError_t cudaHostUnregister(void* ptr) {
  SIMCUDA_DEVICE(d);
  return Ret(d->HostUnregister(ptr));
}

cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  SIMCUDA_DEVICE(d);
  if (pDevice == nullptr || flags != 0) return Ret(cudaErrorInvalidValue);
  cudaPointerAttributes attr;
  d->PointerAttributes(&attr, pHost);
  if (attr.type != cudaMemoryTypeHost) return Ret(cudaErrorInvalidValue);
  *pDevice = pHost;  // unified addressing: the same address on both sides
  return cudaSuccess;
}

cudaError_t cudaFree(void* devPtr) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Free(devPtr));
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->FreeAsync(devPtr, hStream));
}

cudaError_t cudaFreeHost(void* ptr) {
  SIMCUDA_DEVICE(d);
  return Ret(d->FreeHost(ptr));
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  SIMCUDA_DEVICE(d);
  return Ret(d->PointerAttributes(attributes, ptr));
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Memcpy(dst, src, count, kind, nullptr, true));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Memcpy(dst, src, count, kind, stream, false));
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Memset(devPtr, value, count, nullptr, true));
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Memset(devPtr, value, count, stream, false));
}

// The same for --default-stream per-thread builds: the default stream is the calling thread's. Each entry point
// goes to the device itself, never through another exported one (which an interposer would see twice).
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Memcpy(dst, src, count, kind, cudaStreamPerThread, true));
}

cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Memcpy(dst, src, count, kind, PerThreadStream(stream), false));
}

cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Memset(devPtr, value, count, cudaStreamPerThread, true));
}

cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Memset(devPtr, value, count, PerThreadStream(stream), false));
}

cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                 struct cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                 cudaStream_t stream) {
  return Ret(simcuda::MemcpyBatch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream));
}

cudaError_t cudaMemcpyBatchAsync_ptsz(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                      struct cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                      cudaStream_t stream) {
  return Ret(simcuda::MemcpyBatch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, PerThreadStream(stream)));
}

cudaError_t cudaMemPrefetchAsync(const void* devPtr, size_t count, struct cudaMemLocation location,
                                 unsigned int flags, cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  if (flags != 0) return Ret(cudaErrorInvalidValue);
  const simcuda::Range r{reinterpret_cast<uintptr_t>(devPtr), count};
  return Ret(d->Prefetch({&r, 1}, location, stream));
}

cudaError_t cudaMemPrefetchBatchAsync(void** dptrs, size_t* sizes, size_t count,
                                      struct cudaMemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                      size_t numPrefetchLocs, unsigned long long flags, cudaStream_t stream) {
  return PrefetchBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, stream, false);
}

cudaError_t cudaMemDiscardBatchAsync(void** dptrs, size_t* sizes, size_t count, unsigned long long flags,
                                     cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  if (flags != 0 || dptrs == nullptr || sizes == nullptr) return Ret(cudaErrorInvalidValue);
  return Ret(d->DiscardBatch(Ranges(dptrs, sizes, count), stream));
}

cudaError_t cudaMemDiscardAndPrefetchBatchAsync(void** dptrs, size_t* sizes, size_t count,
                                                struct cudaMemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                size_t numPrefetchLocs, unsigned long long flags,
                                                cudaStream_t stream) {
  return PrefetchBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, stream, true);
}

cudaError_t cudaMemAdvise(const void* devPtr, size_t count, enum cudaMemoryAdvise advice,
                          struct cudaMemLocation location) {
  SIMCUDA_DEVICE(d);
  return Ret(d->Advise(devPtr, count, advice, location));
}

// ---- streams and events -----------------------------------------------------------------------------------

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->StreamCreate(pStream, cudaStreamDefault, 0));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  SIMCUDA_DEVICE(d);
  return Ret(d->StreamCreate(pStream, flags, 0));
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  SIMCUDA_DEVICE(d);
  return Ret(d->StreamCreate(pStream, flags, priority));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->StreamDestroy(stream));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->StreamSynchronize(stream));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  const cudaError_t e = d->StreamQuery(stream);
  return e == cudaErrorNotReady ? e : Ret(e);  // "not ready" is an answer, not an error to remember
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  SIMCUDA_DEVICE(d);
  if ((flags & ~cudaEventWaitExternal) != 0) return Ret(cudaErrorInvalidValue);
  return Ret(d->StreamWaitEvent(stream, event));
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  return StreamField(hStream, flags, &CUstream_st::flags);
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  return StreamField(hStream, priority, &CUstream_st::priority);
}

cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long* streamId) {
  return StreamField(hStream, streamId, &CUstream_st::id);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* pCaptureStatus) {
  if (pCaptureStatus == nullptr) return Ret(cudaErrorInvalidValue);
  *pCaptureStatus = cudaStreamCaptureStatusNone;  // graphs are not simulated
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  SIMCUDA_DEVICE(d);
  return Ret(d->EventCreate(event, cudaEventDefault));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  SIMCUDA_DEVICE(d);
  return Ret(d->EventCreate(event, flags));
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  SIMCUDA_DEVICE(d);
  return Ret(d->EventDestroy(event));
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  SIMCUDA_DEVICE(d);
  return Ret(d->EventRecord(event, stream));
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  SIMCUDA_DEVICE(d);
  if ((flags & ~cudaEventRecordExternal) != 0) return Ret(cudaErrorInvalidValue);
  return Ret(d->EventRecord(event, stream));
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  SIMCUDA_DEVICE(d);
  return Ret(d->EventSynchronize(event));
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  SIMCUDA_DEVICE(d);
  const cudaError_t e = d->EventQuery(event);
  return e == cudaErrorNotReady ? e : Ret(e);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  SIMCUDA_DEVICE(d);
  return Ret(d->EventElapsedTime(ms, start, end));
}

// ---- kernels ------------------------------------------------------------------------------------------------

void** __cudaRegisterFatBinary(void* fatCubin) {
  simcuda::Device* d = Dev();
  if (d == nullptr) return nullptr;
  return reinterpret_cast<void**>(d->kernels().LoadFatBinary(fatCubin));
}

void __cudaRegisterFatBinaryEnd(void**) {}

void __cudaUnregisterFatBinary(void** fatCubinHandle) {
  if (simcuda::Device* d = Dev()) d->kernels().Unload(reinterpret_cast<CUmod_st*>(fatCubinHandle));
}

void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char*, const char* deviceName, int,
                            uint3*, uint3*, dim3*, dim3*, int*) {
  simcuda::Device* d = Dev();
  if (d == nullptr || fatCubinHandle == nullptr) return;
  auto* module = reinterpret_cast<CUmod_st*>(fatCubinHandle);
  if (module->simcuda_image && !d->kernels().BindHostStub(module, hostFun, deviceName)) {
    simcuda::WarnOnce((std::string("__cudaRegisterFunction: the image has no kernel named ") + deviceName).c_str());
  }
}

char __cudaInitModule(void**) { return 1; }

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st* stream) {
  t_call_configs.push_back({gridDim, blockDim, sharedMem, stream});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream) {
  if (t_call_configs.empty()) return Ret(cudaErrorMissingConfiguration);
  const CallConfig c = t_call_configs.back();
  t_call_configs.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shared;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                             cudaStream_t stream) {
  return Launch(func, gridDim, blockDim, args, sharedMem, stream);
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  if (config == nullptr) return Ret(cudaErrorInvalidValue);
  return LaunchExC(config, func, args, config->stream);
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) {
  SIMCUDA_DEVICE(d);
  if (kernel == nullptr) return Ret(cudaErrorInvalidValue);
  const CUfunc_st* fn = Kernel(d, hostFun);
  if (fn == nullptr) return Ret(cudaErrorInvalidDeviceFunction);
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<CUfunc_st*>(fn));
  return cudaSuccess;
}

cudaError_t cudaGetKernel(cudaKernel_t* kernelPtr, const void* entryFuncAddr) {
  return __cudaGetKernel(kernelPtr, entryFuncAddr);
}

cudaError_t cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr) {
  SIMCUDA_DEVICE(d);
  if (functionPtr == nullptr) return Ret(cudaErrorInvalidValue);
  const CUfunc_st* fn = Kernel(d, symbolPtr);
  if (fn == nullptr) return Ret(cudaErrorInvalidDeviceFunction);
  *functionPtr = const_cast<CUfunc_st*>(fn);
  return cudaSuccess;
}

// What nvcc 13's <<<>>> calls (crt/host_runtime.h, unless __NV_LEGACY_LAUNCH): the real library launches here
// without going through its exported cudaLaunchKernel, so a tool that interposes only cudaLaunchKernel never
// sees these launches; neither does simcuda's (all four launch through Launch below, not through each other).
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                               cudaStream_t stream) {
  return Launch(kernel, gridDim, blockDim, args, sharedMem, stream);
}

// The _ptsz entry points (nvcc --default-stream per-thread): the NULL stream is the calling thread's stream.
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                    cudaStream_t stream) {
  return Launch(kernel, gridDim, blockDim, args, sharedMem, PerThreadStream(stream));
}

cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                  cudaStream_t stream) {
  return Launch(func, gridDim, blockDim, args, sharedMem, PerThreadStream(stream));
}

// Cooperative launches run as any other here: the model has no co-residency limit to check against.
cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                        cudaStream_t stream) {
  return Launch(func, gridDim, blockDim, args, sharedMem, stream);
}

cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                             size_t sharedMem, cudaStream_t stream) {
  return Launch(func, gridDim, blockDim, args, sharedMem, PerThreadStream(stream));
}

cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  if (config == nullptr) return Ret(cudaErrorInvalidValue);
  return LaunchExC(config, func, args, PerThreadStream(config->stream));
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  SIMCUDA_DEVICE(d);
  return Ret(d->LaunchHostFunc(stream, fn, userData));
}

cudaError_t cudaFuncGetParamInfo(const void* func, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  SIMCUDA_DEVICE(d);
  const CUfunc_st* fn = Kernel(d, func);
  if (fn == nullptr) return Ret(cudaErrorInvalidDeviceFunction);
  if (paramIndex >= fn->param_sizes.size()) return Ret(cudaErrorInvalidValue);
  if (paramOffset != nullptr) *paramOffset = fn->param_offsets[paramIndex];
  if (paramSize != nullptr) *paramSize = fn->param_sizes[paramIndex];
  return cudaSuccess;
}

cudaError_t cudaFuncGetName(const char** name, const void* func) {
  SIMCUDA_DEVICE(d);
  if (name == nullptr) return Ret(cudaErrorInvalidValue);
  const CUfunc_st* fn = Kernel(d, func);
  if (fn == nullptr) return Ret(cudaErrorInvalidDeviceFunction);
  *name = fn->name.c_str();
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  SIMCUDA_DEVICE(d);
  if (attr == nullptr) return Ret(cudaErrorInvalidValue);
  if (Kernel(d, func) == nullptr) return Ret(cudaErrorInvalidDeviceFunction);
  std::memset(attr, 0, sizeof(*attr));
  attr->maxThreadsPerBlock = 1024;
  attr->numRegs = 32;
  attr->ptxVersion = attr->binaryVersion = 70;
  attr->maxDynamicSharedSizeBytes = 48 << 10;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute, int) {
  SIMCUDA_DEVICE(d);
  return Kernel(d, func) != nullptr ? cudaSuccess : Ret(cudaErrorInvalidDeviceFunction);
}

// ---- driver entry points ------------------------------------------------------------------------------------

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult* driverStatus) {
  if (symbol == nullptr || funcPtr == nullptr) return Ret(cudaErrorInvalidValue);
  *funcPtr = nullptr;
  GetProcAddressFn get = DriverGetProcAddress();
  if (get == nullptr) return Ret(cudaErrorInsufficientDriver);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = get(symbol, funcPtr, static_cast<int>(cudaVersion), flags, &status);
  if (r == CUDA_ERROR_INVALID_VALUE) return Ret(cudaErrorInvalidValue);
  if (driverStatus != nullptr) {
    *driverStatus = status == CU_GET_PROC_ADDRESS_SUCCESS                 ? cudaDriverEntryPointSuccess
                    : status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? cudaDriverEntryPointVersionNotSufficent
                                                                           : cudaDriverEntryPointSymbolNotFound;
  }
  // As documented: success with a null pointer when the symbol is unknown or too new.
  if (r != CUDA_SUCCESS) *funcPtr = nullptr;
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult* driverStatus) {
  return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

}  // extern "C"
