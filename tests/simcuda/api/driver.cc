// libcuda.so.1 on simcuda: the driver API subset over the same process-wide device as the runtime.
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <string>
#include <vector>

#include "api/driver_internal.h"
#include "api/process.h"

// The unversioned legacy entry point is exported too; cuda.h renames cuGetProcAddress to its _v2.
#undef cuGetProcAddress
extern "C" CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
// Likewise cuMemcpyBatchAsync: CUDA 12.8's ABI (with failIdx) keeps the plain name.
#undef cuMemcpyBatchAsync
extern "C" CUresult cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                       CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                       size_t* failIdx, CUstream hStream);

struct CUctx_st {
  int unused;
};

namespace {

CUctx_st g_primary_context{0};

using simcuda::PerThread;
using simcuda::Ptr;
using simcuda::ToCu;

CUresult Fill(CUdeviceptr dst, uint32_t value, size_t element_bytes, size_t count, CUstream stream, bool blocking) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Fill(Ptr(dst), value, element_bytes, count, stream, blocking));
}

// cuMemcpyBatchAsync, either ABI; CUDA 12.8's names the failing copy (failIdx: SIZE_MAX when the batch as a
// whole is refused).
CUresult Batch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,
               size_t* attrsIdxs, size_t numAttrs, CUstream stream, size_t* failIdx) {
  static_assert(sizeof(CUdeviceptr) == sizeof(void*));
  const cudaError_t e = simcuda::MemcpyBatch(reinterpret_cast<void* const*>(dsts),
                                             reinterpret_cast<const void* const*>(srcs), sizes, count, attrs,
                                             attrsIdxs, numAttrs, stream);
  if (failIdx != nullptr) *failIdx = e == cudaSuccess ? 0 : SIZE_MAX;
  return ToCu(e);
}

cudaMemLocation ToLocation(CUmemLocation l) {
  cudaMemLocation r;
  r.type = static_cast<cudaMemLocationType>(l.type);
  r.id = l.id;
  return r;
}

std::vector<simcuda::Range> Ranges(const CUdeviceptr* ptrs, const size_t* sizes, size_t count) {
  std::vector<simcuda::Range> ranges(count);
  for (size_t i = 0; i < count; ++i) ranges[i] = {static_cast<uintptr_t>(ptrs[i]), sizes[i]};
  return ranges;
}

// cuMemPrefetchBatchAsync, and cuMemDiscardAndPrefetchBatchAsync with `discard`.
CUresult PrefetchBatch(const CUdeviceptr* dptrs, const size_t* sizes, size_t count, const CUmemLocation* locs,
                       const size_t* loc_starts, size_t num_locs, unsigned long long flags, CUstream stream,
                       bool discard) {
  SIMCUDA_DEVICE(d);
  if (flags != 0 || dptrs == nullptr || sizes == nullptr || locs == nullptr || loc_starts == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::vector<cudaMemLocation> locations(num_locs);
  for (size_t i = 0; i < num_locs; ++i) locations[i] = ToLocation(locs[i]);
  return ToCu(d->PrefetchBatch(Ranges(dptrs, sizes, count), locations, {loc_starts, num_locs}, discard, stream));
}

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

// The name or the text of an error code.
CUresult Describe(CUresult error, const char** out, const char* ErrorText::*what) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = nullptr;
  for (const ErrorText& t : kErrors) {
    if (t.code == error) {
      *out = t.*what;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

// Base names whose current ABI is a suffixed symbol, with the CUDA version that introduced it.
struct Versioned {
  const char* base;
  int since;
  const char* symbol;
};
constexpr Versioned kVersioned[] = {
    {"cuMemAlloc", 3020, "cuMemAlloc_v2"},
    {"cuMemFree", 3020, "cuMemFree_v2"},
    {"cuMemGetInfo", 3020, "cuMemGetInfo_v2"},
    {"cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2"},
    {"cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2"},
    {"cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2"},
    {"cuMemcpyDtoD", 3020, "cuMemcpyDtoD_v2"},
    {"cuMemcpyHtoDAsync", 3020, "cuMemcpyHtoDAsync_v2"},
    {"cuMemcpyDtoHAsync", 3020, "cuMemcpyDtoHAsync_v2"},
    {"cuMemcpyDtoDAsync", 3020, "cuMemcpyDtoDAsync_v2"},
    {"cuMemsetD8", 3020, "cuMemsetD8_v2"},
    {"cuMemsetD16", 3020, "cuMemsetD16_v2"},
    {"cuMemsetD32", 3020, "cuMemsetD32_v2"},
    {"cuMemcpyBatchAsync", 13000, "cuMemcpyBatchAsync_v2"},
    {"cuStreamDestroy", 4000, "cuStreamDestroy_v2"},
    {"cuEventDestroy", 4000, "cuEventDestroy_v2"},
    {"cuEventElapsedTime", 12080, "cuEventElapsedTime_v2"},
    {"cuGetProcAddress", 12000, "cuGetProcAddress_v2"},
    {"cuMemPrefetchAsync", 12020, "cuMemPrefetchAsync_v2"},
    {"cuMemAllocHost", 3020, "cuMemAllocHost_v2"},
    {"cuMemHostRegister", 6050, "cuMemHostRegister_v2"},
    {"cuStreamWaitValue32", 11070, "cuStreamWaitValue32_v2"},
    {"cuStreamWaitValue64", 11070, "cuStreamWaitValue64_v2"},
    {"cuStreamWriteValue32", 11070, "cuStreamWriteValue32_v2"},
    {"cuStreamWriteValue64", 11070, "cuStreamWriteValue64_v2"},
    {"cuStreamBatchMemOp", 11070, "cuStreamBatchMemOp_v2"},
};

// This library itself: lookups must find its own functions, never an interposed or unrelated symbol.
void* Self(Dl_info* info) {
  static Dl_info self{};
  static void* handle = [] {
    dladdr(reinterpret_cast<void*>(&g_primary_context), &self);
    return self.dli_fname != nullptr ? dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  }();
  *info = self;
  return handle;
}

// `name` when this library implements it: a generated stub for an unimplemented function is a weak symbol.
void* Implemented(void* handle, const char* name) {
  void* fn = dlsym(handle, name);
  Dl_info info;
  void* entry = nullptr;
  if (fn == nullptr || dladdr1(fn, &info, &entry, RTLD_DL_SYMENT) == 0 || entry == nullptr) return nullptr;
  const auto* sym = static_cast<const ElfW(Sym)*>(entry);
  return ELF64_ST_BIND(sym->st_info) == STB_WEAK ? nullptr : fn;
}

// A per-thread-default-stream lookup gets the _ptsz / _ptds form where this library implements one, the function
// itself otherwise (the launches, which have no per-thread form here).
CUresult Lookup(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (cudaVersion > CUDA_VERSION) return CUDA_ERROR_INVALID_VALUE;
  if (std::strncmp(symbol, "cu", 2) != 0 || std::strncmp(symbol, "cuda", 4) == 0) return CUDA_ERROR_NOT_FOUND;
  const char* name = symbol;
  for (const Versioned& v : kVersioned) {
    if (std::strcmp(v.base, symbol) == 0 && cudaVersion >= v.since) name = v.symbol;
  }
  Dl_info self;
  void* handle = Self(&self);
  void* fn = nullptr;
  if (handle != nullptr && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0) {
    for (const char* suffix : {"_ptsz", "_ptds"}) {
      if (fn == nullptr) fn = Implemented(handle, (std::string(name) + suffix).c_str());
    }
  }
  if (fn == nullptr && handle != nullptr) fn = dlsym(handle, name);
  Dl_info where;
  if (fn == nullptr || dladdr(fn, &where) == 0 || where.dli_fbase != self.dli_fbase) return CUDA_ERROR_NOT_FOUND;
  *pfn = fn;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return simcuda::Global() != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = simcuda::Global() != nullptr ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  SIMCUDA_DEVICE(d);
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  cudaDeviceProp prop;
  d->Properties(&prop);
  std::snprintf(name, static_cast<size_t>(len), "%s", prop.name);
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  SIMCUDA_DEVICE(d);
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = d->config().capacity_bytes;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  SIMCUDA_DEVICE(d);
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  // The driver's and the runtime's attribute enumerations share their values.
  return ToCu(d->Attribute(pi, static_cast<cudaDeviceAttr>(attrib)));
}

CUresult cuGetErrorName(CUresult error, const char** pStr) { return Describe(error, pStr, &ErrorText::name); }

CUresult cuGetErrorString(CUresult error, const char** pStr) { return Describe(error, pStr, &ErrorText::text); }

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = &g_primary_context;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  return cuCtxGetCurrent(pctx);
}

CUresult cuCtxSynchronize(void) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Synchronize());
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  return Lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return Lookup(symbol, pfn, cudaVersion, flags, nullptr);
}

// ---- memory -------------------------------------------------------------------------------------------------

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  SIMCUDA_DEVICE(d);
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  const cudaError_t e = d->Malloc(&p, bytesize);
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return ToCu(e);
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  SIMCUDA_DEVICE(d);
  if (dptr == nullptr || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* p = nullptr;
  const cudaError_t e = d->MallocManaged(&p, bytesize);
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return ToCu(e);
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  SIMCUDA_DEVICE(d);
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  const cudaError_t e = d->MallocAsync(&p, bytesize, hStream);
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return ToCu(e);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Free(Ptr(dptr)));
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->FreeAsync(Ptr(dptr), hStream));
}

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  SIMCUDA_DEVICE(d);
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(d->MemGetInfo(free, total));
}

// ---- copies and memsets: the synchronous ones on the default stream (the legacy one, or the calling thread's
// for the _ptds forms), the asynchronous ones on theirs (a null stream of a _ptsz form is the thread's). None
// calls another exported entry point, which an interposer would see twice ----

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(Ptr(dst), Ptr(src), ByteCount, cudaMemcpyDefault, nullptr, true));
}
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(Ptr(dst), Ptr(src), ByteCount, cudaMemcpyDefault, CU_STREAM_PER_THREAD, true));
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(Ptr(dstDevice), srcHost, ByteCount, cudaMemcpyHostToDevice, nullptr, true));
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(Ptr(dstDevice), srcHost, ByteCount, cudaMemcpyHostToDevice, CU_STREAM_PER_THREAD, true));
}
CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(dstHost, Ptr(srcDevice), ByteCount, cudaMemcpyDeviceToHost, nullptr, true));
}
CUresult cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(dstHost, Ptr(srcDevice), ByteCount, cudaMemcpyDeviceToHost, CU_STREAM_PER_THREAD, true));
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(Ptr(dstDevice), Ptr(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, nullptr, true));
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  SIMCUDA_DEVICE(d);
  return ToCu(
      d->Memcpy(Ptr(dstDevice), Ptr(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, CU_STREAM_PER_THREAD, true));
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(Ptr(dst), Ptr(src), ByteCount, cudaMemcpyDefault, hStream, false));
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(Ptr(dst), Ptr(src), ByteCount, cudaMemcpyDefault, PerThread(hStream), false));
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(Ptr(dstDevice), srcHost, ByteCount, cudaMemcpyHostToDevice, hStream, false));
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(Ptr(dstDevice), srcHost, ByteCount, cudaMemcpyHostToDevice, PerThread(hStream), false));
}
CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(dstHost, Ptr(srcDevice), ByteCount, cudaMemcpyDeviceToHost, hStream, false));
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(dstHost, Ptr(srcDevice), ByteCount, cudaMemcpyDeviceToHost, PerThread(hStream), false));
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->Memcpy(Ptr(dstDevice), Ptr(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, hStream, false));
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(
      d->Memcpy(Ptr(dstDevice), Ptr(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, PerThread(hStream), false));
}

// The batches: CUDA 12.8's ABI and 13.0's (_v2), legacy and per-thread.
CUresult cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                            CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, size_t* failIdx,
                            CUstream hStream) {
  return Batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream, failIdx);
}
CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                 CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, size_t* failIdx,
                                 CUstream hStream) {
  return Batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, PerThread(hStream), failIdx);
}
CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                               CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, CUstream hStream) {
  return Batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream, nullptr);
}
CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                    CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                    CUstream hStream) {
  return Batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, PerThread(hStream), nullptr);
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return Fill(dstDevice, uc, 1, N, nullptr, true);
}
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return Fill(dstDevice, uc, 1, N, CU_STREAM_PER_THREAD, true);
}
CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  return Fill(dstDevice, us, 2, N, nullptr, true);
}
CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  return Fill(dstDevice, us, 2, N, CU_STREAM_PER_THREAD, true);
}
CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return Fill(dstDevice, ui, 4, N, nullptr, true);
}
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return Fill(dstDevice, ui, 4, N, CU_STREAM_PER_THREAD, true);
}
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return Fill(dstDevice, uc, 1, N, hStream, false);
}
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return Fill(dstDevice, uc, 1, N, PerThread(hStream), false);
}
CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
  return Fill(dstDevice, us, 2, N, hStream, false);
}
CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
  return Fill(dstDevice, us, 2, N, PerThread(hStream), false);
}
CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return Fill(dstDevice, ui, 4, N, hStream, false);
}
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return Fill(dstDevice, ui, 4, N, PerThread(hStream), false);
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                               CUstream hStream) {
  SIMCUDA_DEVICE(d);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const simcuda::Range r{static_cast<uintptr_t>(devPtr), count};
  return ToCu(d->Prefetch({&r, 1}, ToLocation(location), hStream));
}

CUresult cuMemPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count, CUmemLocation* prefetchLocs,
                                 size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                                 CUstream hStream) {
  return PrefetchBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream, false);
}

CUresult cuMemDiscardBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count, unsigned long long flags,
                                CUstream hStream) {
  SIMCUDA_DEVICE(d);
  if (flags != 0 || dptrs == nullptr || sizes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(d->DiscardBatch(Ranges(dptrs, sizes, count), hStream));
}

CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                           CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                           size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  return PrefetchBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream, true);
}

// ---- streams and events -----------------------------------------------------------------------------------

CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->StreamCreate(phStream, Flags, 0));
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->StreamDestroy(hStream));
}

CUresult cuStreamSynchronize(CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->StreamSynchronize(hStream));
}

CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->EventCreate(phEvent, Flags));
}

CUresult cuEventDestroy_v2(CUevent hEvent) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->EventDestroy(hEvent));
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->EventRecord(hEvent, hStream));
}

CUresult cuEventSynchronize(CUevent hEvent) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->EventSynchronize(hEvent));
}

CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->EventElapsedTime(pMilliseconds, hStart, hEnd));
}

// ---- modules and kernels ------------------------------------------------------------------------------------

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  SIMCUDA_DEVICE(d);
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* m = static_cast<const simcuda_module*>(image);
  if (m->magic != SIMCUDA_MODULE_MAGIC || m->version != SIMCUDA_MODULE_VERSION) return CUDA_ERROR_INVALID_IMAGE;
  *module = d->kernels().Load(image);
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) {
  SIMCUDA_DEVICE(d);
  return d->kernels().Unload(hmod) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  SIMCUDA_DEVICE(d);
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!d->kernels().IsModule(hmod)) return CUDA_ERROR_INVALID_HANDLE;
  *hfunc = d->kernels().Find(hmod, name);
  return *hfunc != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  SIMCUDA_DEVICE(d);
  if (!d->kernels().IsFunction(func)) return CUDA_ERROR_INVALID_HANDLE;
  if (paramIndex >= func->param_sizes.size()) return CUDA_ERROR_INVALID_VALUE;
  if (paramOffset != nullptr) *paramOffset = func->param_offsets[paramIndex];
  if (paramSize != nullptr) *paramSize = func->param_sizes[paramIndex];
  return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  SIMCUDA_DEVICE(d);
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!d->kernels().IsFunction(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  *name = hfunc->name.c_str();
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  SIMCUDA_DEVICE(d);
  if (!d->kernels().IsFunction(f)) return CUDA_ERROR_INVALID_HANDLE;
  std::vector<void*> from_buffer;
  if (kernelParams == nullptr && extra != nullptr) {
    // CU_LAUNCH_PARAM_BUFFER_POINTER: the parameters packed in one buffer at their offsets.
    char* buffer = nullptr;
    for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = static_cast<char*>(e[1]);
    }
    if (buffer == nullptr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t off : f->param_offsets) from_buffer.push_back(buffer + off);
    kernelParams = from_buffer.data();
  }
  const simcuda::LaunchDims dims{dim3(gridDimX, gridDimY, gridDimZ), dim3(blockDimX, blockDimY, blockDimZ),
                                 sharedMemBytes};
  return ToCu(d->Launch(f, dims, kernelParams, hStream));
}

// A cooperative launch runs as any other here: the model has no co-residency limit to check against.
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream, void** kernelParams) {
  if (kernelParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                        kernelParams, nullptr);
}

}  // extern "C"
