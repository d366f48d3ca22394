// libcuda.so.1 on simcuda, its memory beyond cuMemAlloc: pinned host memory, CUDA's virtual memory management
// (reservations, chunks, mappings, access) and the stream memory operations, with the checks the driver documents.
#include <cuda.h>

#include "api/driver_internal.h"

namespace {

using simcuda::PerThread;
using simcuda::ToCu;

uintptr_t Addr(CUdeviceptr p) { return static_cast<uintptr_t>(p); }

// Where a chunk of these properties lives, or the error cuMemCreate and cuMemGetAllocationGranularity give.
CUresult ChunkPlace(const CUmemAllocationProp* prop, bool* on_host) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      *on_host = false;
      return prop->location.id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:  // the id is ignored; no IPC handle types for host chunks
      *on_host = true;
      return prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_NONE ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:  // one NUMA node: its id is 0
      *on_host = true;
      return prop->location.id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:  // CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT among them, as documented
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult WaitValue(CUstream stream, CUdeviceptr addr, cuuint64_t value, bool wide, unsigned int flags) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->WaitValue(stream, Addr(addr), value, wide, flags));
}

CUresult WriteValue(CUstream stream, CUdeviceptr addr, cuuint64_t value, bool wide, unsigned int flags) {
  SIMCUDA_DEVICE(d);
  if ((flags & ~CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) != 0) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(d->WriteValue(stream, Addr(addr), value, wide));
}

CUresult BatchMemOp(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* ops, unsigned int flags) {
  if (flags != 0 || (count > 0 && ops == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& op = ops[i];
    CUresult r = CUDA_SUCCESS;
    switch (op.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
        const bool wide = op.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
        r = WaitValue(stream, op.waitValue.address, wide ? op.waitValue.value64 : op.waitValue.value, wide,
                      op.waitValue.flags);
        break;
      }
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
        const bool wide = op.operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
        r = WriteValue(stream, op.writeValue.address, wide ? op.writeValue.value64 : op.writeValue.value, wide,
                       op.writeValue.flags);
        break;
      }
      case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      case CU_STREAM_MEM_OP_BARRIER:
        break;  // every write is visible at once here
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

// ---- pinned host memory -------------------------------------------------------------------------------------

CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->MallocHost(pp, bytesize));
}

CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  SIMCUDA_DEVICE(d);
  constexpr unsigned kKnown = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if ((Flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(d->MallocHost(pp, bytesize));
}

CUresult cuMemFreeHost(void* p) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->FreeHost(p));
}

CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  SIMCUDA_DEVICE(d);
  constexpr unsigned kKnown = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                              CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if ((Flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(d->HostRegister(p, bytesize));
}

CUresult cuMemHostUnregister(void* p) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->HostUnregister(p));
}

// ---- virtual memory management ------------------------------------------------------------------------------

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  SIMCUDA_DEVICE(d);
  bool on_host = false;
  if (granularity == nullptr ||
      (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUresult r = ChunkPlace(prop, &on_host);
  if (r != CUDA_SUCCESS) return r;
  *granularity = simcuda::kVmmGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  SIMCUDA_DEVICE(d);
  // The hint is a hint: a reservation goes where there is room.
  if (ptr == nullptr || flags != 0 || addr % 4096 != 0) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t base = 0;
  const CUresult r = ToCu(d->AddressReserve(&base, size, alignment));
  if (r == CUDA_SUCCESS) *ptr = static_cast<CUdeviceptr>(base);
  return r;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->AddressFree(Addr(ptr), size));
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  SIMCUDA_DEVICE(d);
  bool on_host = false;
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = ChunkPlace(prop, &on_host);
  if (r != CUDA_SUCCESS) return r;
  uint64_t h = 0;
  const CUresult c = ToCu(d->MemCreate(&h, size, on_host, prop->location.type, prop->location.id));
  if (c == CUDA_SUCCESS) *handle = h;
  return c;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->MemRelease(handle));
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  SIMCUDA_DEVICE(d);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return ToCu(d->MemMap(Addr(ptr), size, offset, handle));
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  SIMCUDA_DEVICE(d);
  return ToCu(d->MemUnmap(Addr(ptr), size));
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  SIMCUDA_DEVICE(d);
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  // The device's access is what the model checks; a host location's is accepted and changes nothing here.
  bool for_device = false;
  simcuda::Access access = simcuda::Access::kNone;
  for (size_t i = 0; i < count; ++i) {
    const CUmemAccessDesc& a = desc[i];
    if (a.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && a.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        a.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (a.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
      if (a.location.id != 0) return CUDA_ERROR_INVALID_DEVICE;
      for_device = true;
      access = a.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? simcuda::Access::kReadWrite
               : a.flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? simcuda::Access::kRead
                                                             : simcuda::Access::kNone;
    } else if (a.location.type != CU_MEM_LOCATION_TYPE_HOST && a.location.type != CU_MEM_LOCATION_TYPE_HOST_NUMA) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (!for_device) {
    simcuda::Access now;  // the range must still be mapped whole
    const CUresult r = ToCu(d->MemGetAccess(Addr(ptr), &now));
    return r != CUDA_SUCCESS ? r : ToCu(d->MemSetAccess(Addr(ptr), size, now));
  }
  return ToCu(d->MemSetAccess(Addr(ptr), size, access));
}

CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  SIMCUDA_DEVICE(d);
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  simcuda::Access access;
  const CUresult r = ToCu(d->MemGetAccess(Addr(ptr), &access));
  if (r != CUDA_SUCCESS) return r;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    return CUDA_SUCCESS;
  }
  if (location->id != 0) return CUDA_ERROR_INVALID_DEVICE;
  *flags = access == simcuda::Access::kReadWrite ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
           : access == simcuda::Access::kRead    ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                                 : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  SIMCUDA_DEVICE(d);
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t h = 0;
  const CUresult r = ToCu(d->MemRetain(&h, reinterpret_cast<uintptr_t>(addr)));
  if (r == CUDA_SUCCESS) *handle = h;
  return r;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  SIMCUDA_DEVICE(d);
  simcuda::Chunk c;
  if (prop == nullptr || !d->ChunkInfo(handle, &c)) return CUDA_ERROR_INVALID_VALUE;
  *prop = CUmemAllocationProp{};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = static_cast<CUmemLocationType>(c.location_type);
  prop->location.id = c.location_id;
  return CUDA_SUCCESS;
}

// ---- stream memory operations: the _v2 ABI (what cuda.h names cuStreamWaitValue32 and the rest since 11.7) --

CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return WaitValue(stream, addr, value, false, flags);
}
CUresult cuStreamWaitValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return WaitValue(PerThread(stream), addr, value, false, flags);
}
CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return WaitValue(stream, addr, value, true, flags);
}
CUresult cuStreamWaitValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return WaitValue(PerThread(stream), addr, value, true, flags);
}
CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return WriteValue(stream, addr, value, false, flags);
}
CUresult cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  return WriteValue(PerThread(stream), addr, value, false, flags);
}
CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return WriteValue(stream, addr, value, true, flags);
}
CUresult cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  return WriteValue(PerThread(stream), addr, value, true, flags);
}
CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                               unsigned int flags) {
  return BatchMemOp(stream, count, paramArray, flags);
}
CUresult cuStreamBatchMemOp_v2_ptsz(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                                    unsigned int flags) {
  return BatchMemOp(PerThread(stream), count, paramArray, flags);
}

}  // extern "C"
