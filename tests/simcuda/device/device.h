// The simulated GPU: memory and capacity, managed-memory residency, engines and streams on a virtual clock.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "device/address_space.h"
#include "device/config.h"
#include "device/fair_mutex.h"
#include "device/host_clock.h"
#include "device/kernels.h"
#include "device/timeline.h"
#include "device/vmm.h"

// A stream: the time its last operation completes. Created streams are owned by the Device.
struct CUstream_st {
  unsigned flags = 0;  // cudaStreamNonBlocking or 0
  int priority = 0;
  double tail = 0;     // virtual time when everything enqueued so far has completed
  bool legacy = false;
  unsigned long long id = 0;
  // A cuStreamWaitValue not yet found true: what follows on the stream waits for it (Device::Await).
  struct ValueWait {
    uintptr_t addr = 0;
    uint64_t value = 0;
    bool wide = false;    // 64-bit
    unsigned condition = 0;  // CU_STREAM_WAIT_VALUE_GEQ, _EQ, _AND, _NOR
  };
  bool waiting = false;
  ValueWait wait;
};

struct CUevent_st {
  unsigned flags = 0;
  bool recorded = false;
  double time = 0;  // virtual time at which the recorded work completes
};

namespace simcuda {

// Managed memory moves and takes device memory in 64 KiB pages: cudaMemPrefetchAsync rounds a range to the CPU
// page (4 KiB on x86-64, 64 KiB on arm64) and the driver backs a partly resident 2 MiB block with 64 KiB chunks.
inline constexpr uint64_t kPageBytes = 64ull << 10;
// Managed allocations start on a 2 MiB boundary, and a fault is serviced per 2 MiB block of an allocation: one
// fault latency for every block a kernel touches with pages missing (the driver batches faults per block).
inline constexpr uint64_t kBlockBytes = 2ull << 20;
inline constexpr uint64_t kPagesPerBlock = kBlockBytes / kPageBytes;

enum class MemKind { kDevice, kManaged, kPinnedHost, kRegisteredHost };

// Where a managed page's contents are.
enum class PageState : uint8_t {
  kUnpopulated,  // never touched: first touch populates it without moving data
  kHost,         // on the host; a device access migrates it
  kDevice,       // resident on the device
  kDiscarded,    // contents dropped (and poisoned); a device access populates it without moving data
};

struct Allocation;
struct Page {
  PageState state = PageState::kUnpopulated;
  double available_at = 0;  // when a migration to the device completes
  std::list<Page*>::iterator lru;  // valid while state == kDevice
};

struct Allocation {
  uintptr_t base = 0;
  uint64_t bytes = 0;    // as requested
  uint64_t span = 0;     // address space taken
  uint64_t charged = 0;  // device memory held while allocated (non-managed only)
  MemKind kind = MemKind::kDevice;
  std::vector<Page> pages;  // managed only, one per kPageBytes
};

struct Range {
  uintptr_t addr = 0;
  uint64_t bytes = 0;
};

// Everything the run did; written as JSON at exit when SIMCUDA_STATS names a file.
struct Stats {
  double virtual_time_s = 0;
  uint64_t kernels = 0;
  uint64_t memcpys = 0;
  uint64_t h2d_bytes = 0;  // cudaMemcpy* traffic, pinned and pageable
  uint64_t d2h_bytes = 0;
  uint64_t pageable_bytes = 0;  // of which to or from pageable host memory
  uint64_t faults = 0;
  uint64_t faulted_bytes = 0;  // migrated host -> device by faults
  double fault_stall_s = 0;
  uint64_t prefetched_bytes = 0;          // migrated host -> device by prefetches
  uint64_t prefetched_to_host_bytes = 0;  // migrated device -> host by prefetches to the host
  uint64_t evicted_bytes = 0;             // pushed out to make room, always written back
  uint64_t discarded_bytes = 0;
  uint64_t device_bytes = 0;  // now: non-managed allocations + resident managed pages
  uint64_t peak_device_bytes = 0;
  uint64_t managed_resident_bytes = 0;
  double compute_busy_s = 0;
  double h2d_busy_s = 0;
  double d2h_busy_s = 0;
  double managed_calls_blocked_s = 0;  // host time threads spent in managed-memory calls held for their transfer
  uint64_t vmm_calls = 0;  // CUDA's virtual memory calls that cost time (create, map, set access, unmap, release)
  double vmm_busy_s = 0;   // the time they took, one at a time (the driver runs them one at a time)
};

// Dimensions of one launch.
struct LaunchDims {
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;
};

// One process-wide instance serves the runtime, driver and cuBLAS libraries; tests make their own. Every
// method is thread-safe (one lock) and returns the CUDA runtime error a GPU would give. Work executes
// synchronously on the calling thread when it is enqueued, which is a valid serialization of the program;
// the virtual clock separately works out when each operation would start and end on a GPU, and what each call
// costs the thread that makes it (HostClocks). Once an operation touches a reserved address without a mapping or
// access, the context is lost: that call and every later one return cudaErrorIllegalAddress, as on a GPU.
class Device {
 public:
  explicit Device(Config config);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  bool ok() const { return space_.ok(); }
  const Config& config() const { return config_; }
  KernelRegistry& kernels() { return kernels_; }

  // Device properties and attributes (one device, ordinal 0).
  void Properties(cudaDeviceProp* prop) const;
  cudaError_t Attribute(int* value, cudaDeviceAttr attr) const;

  // Memory. Non-managed allocations count against capacity and fail beyond it; managed ones may exceed it.
  cudaError_t Malloc(void** ptr, size_t bytes);
  cudaError_t MallocAsync(void** ptr, size_t bytes, cudaStream_t stream);
  cudaError_t MallocManaged(void** ptr, size_t bytes);
  cudaError_t MallocHost(void** ptr, size_t bytes);  // pinned host memory
  cudaError_t Free(void* ptr);  // synchronizes the device first, as cudaFree does
  cudaError_t FreeAsync(void* ptr, cudaStream_t stream);
  cudaError_t FreeHost(void* ptr);
  // cudaHostRegister / cuMemHostRegister: the host range becomes pinned (copies use the copy engines at its rate).
  cudaError_t HostRegister(void* ptr, size_t bytes);
  cudaError_t HostUnregister(void* ptr);
  cudaError_t MemGetInfo(size_t* free_bytes, size_t* total_bytes);
  cudaError_t PointerAttributes(cudaPointerAttributes* attr, const void* ptr);

  // CUDA's virtual memory management (the driver's cuMem* calls; device/vmm.h). Device chunks count against the
  // capacity from cuMemCreate until they are gone; host chunks do not. Map, set-access and unmap cost host time.
  cudaError_t AddressReserve(uintptr_t* ptr, size_t bytes, size_t alignment);
  cudaError_t AddressFree(uintptr_t ptr, size_t bytes);
  cudaError_t MemCreate(uint64_t* handle, size_t bytes, bool on_host, int location_type, int location_id);
  cudaError_t MemRelease(uint64_t handle);
  cudaError_t MemMap(uintptr_t ptr, size_t bytes, size_t offset, uint64_t handle);
  // Work still running on the range at the calling thread's time (not known to be done) loses the context.
  cudaError_t MemUnmap(uintptr_t ptr, size_t bytes);
  cudaError_t MemSetAccess(uintptr_t ptr, size_t bytes, Access access);
  cudaError_t MemGetAccess(uintptr_t ptr, Access* access);
  cudaError_t MemRetain(uint64_t* handle, uintptr_t ptr);
  // A copy of a live handle's chunk (false when the handle is not one).
  bool ChunkInfo(uint64_t handle, Chunk* out);

  // Copies and fills; `blocking` makes the host wait for completion (cudaMemcpy, cudaMemset). A copy to or from
  // pageable host memory always returns only when it has ended.
  cudaError_t Memcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                     bool blocking);
  cudaError_t Memset(void* dst, int value, size_t bytes, cudaStream_t stream, bool blocking);
  // cuMemsetD16/D32: `count` elements of 2 or 4 bytes set to `value`; `dst` aligned to the element.
  cudaError_t Fill(void* dst, uint32_t value, size_t element_bytes, size_t count, cudaStream_t stream,
                   bool blocking);

  // Streams and events.
  cudaError_t StreamCreate(cudaStream_t* stream, unsigned flags, int priority);
  cudaError_t StreamDestroy(cudaStream_t stream);
  cudaError_t StreamSynchronize(cudaStream_t stream);
  cudaError_t StreamQuery(cudaStream_t stream);
  cudaError_t StreamWaitEvent(cudaStream_t stream, cudaEvent_t event);
  // A copy of the stream's state (flags, priority, id).
  cudaError_t StreamInfo(cudaStream_t stream, CUstream_st* info);
  cudaError_t EventCreate(cudaEvent_t* event, unsigned flags);
  cudaError_t EventDestroy(cudaEvent_t event);
  cudaError_t EventRecord(cudaEvent_t event, cudaStream_t stream);
  cudaError_t EventSynchronize(cudaEvent_t event);
  cudaError_t EventQuery(cudaEvent_t event);
  cudaError_t EventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
  cudaError_t Synchronize();

  // Stream memory operations (cuStreamWriteValue32/64, cuStreamWaitValue32/64): a 4- or 8-byte write in stream
  // order; a wait that holds what follows on the stream until the value satisfies `condition`
  // (CU_STREAM_WAIT_VALUE_*). The memory must be device memory or pinned host memory. What is enqueued behind an
  // unsatisfied wait makes the enqueuing thread wait (real time) until another thread, or a stream write, makes
  // it true; the stream goes on at the virtual time of that write (a stream write's, or the latest host clock).
  cudaError_t WriteValue(cudaStream_t stream, uintptr_t addr, uint64_t value, bool wide);
  cudaError_t WaitValue(cudaStream_t stream, uintptr_t addr, uint64_t value, bool wide, unsigned condition);

  // Kernels and host functions, in stream order.
  cudaError_t Launch(const CUfunc_st* fn, const LaunchDims& dims, void** args, cudaStream_t stream);
  cudaError_t LaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data);

  // Managed memory: prefetch to a location, discard (no write-back; contents become a NaN pattern). A per-range
  // prefetch to the device returns before its transfer; one to the host returns when it has ended, as measured.
  cudaError_t Prefetch(std::span<const Range> ranges, cudaMemLocation location, cudaStream_t stream);
  cudaError_t Discard(std::span<const Range> ranges, cudaStream_t stream);
  // The batch forms: locations[i] applies to ranges from location_starts[i] on (cudaMemPrefetchBatchAsync's
  // prefetchLocs / prefetchLocIdxs); the legacy default stream is refused, as the runtime refuses it. They return
  // when their transfers have ended (measured on an H100: the calling thread is held for the transfer).
  cudaError_t PrefetchBatch(std::span<const Range> ranges, std::span<const cudaMemLocation> locations,
                            std::span<const size_t> location_starts, bool discard_first, cudaStream_t stream);
  cudaError_t DiscardBatch(std::span<const Range> ranges, cudaStream_t stream);
  cudaError_t Advise(const void* ptr, size_t bytes, cudaMemoryAdvise advice, cudaMemLocation location);

  // The calling thread's position on the virtual clock, and the latest time anything ends.
  double HostTime();
  double Now();
  Stats GetStats();
  std::string StatsJson();
  // The calling thread leaves: its clock holds no one back (called from a thread-exit hook).
  void ThreadExited(std::thread::id id);

  // The byte pattern discarded memory reads as: NaN as float, double and half.
  static constexpr uint8_t kPoisonByte = 0xFF;
  // Virtual time the host spends on one cudaEventQuery / cudaStreamQuery that finds work still pending.
  static constexpr double kPollSeconds = 2e-6;

 private:
  struct TouchResult {
    double ready = 0;  // the operation cannot start before its pages arrive
    double stall = 0;  // fault handling, serialized on the faulting engine
    uint64_t writebacks = 0;
    std::vector<Page*> arrived;
    std::set<std::pair<const Allocation*, size_t>> serviced;  // the 2 MiB blocks whose faults were paid for
  };
  // Where one side of a copy is.
  enum class Side { kDevice, kPinned, kPageable };

  CUstream_st* ResolveStream(cudaStream_t stream);  // null for an unknown handle
  // The opening of a call that enqueues on `stream`: the value waits it follows (Await), the lock, a lost
  // context, and the stream itself (cudaErrorInvalidResourceHandle for an unknown one).
  cudaError_t Begin(cudaStream_t stream, std::unique_lock<FairMutex>* lock, CUstream_st** s);
  bool IsEvent(cudaEvent_t event) const;
  double Ready(const CUstream_st* s);
  // The calling thread spends `seconds` in a call, or waits until `t`.
  void Spend(double seconds);
  // A virtual memory call (`what`, of `bytes` on host or device chunks) takes `seconds`: the driver runs them one at
  // a time, so it starts once the last one has ended. Traced, and counted in the statistics.
  void SpendVmm(const char* what, bool host, uint64_t bytes, double seconds);
  const karma::policy::VmmCosts& Costs(bool host_chunks) const {
    return host_chunks ? config_.profile.host.host_chunks : config_.profile.host.device_chunks;
  }
  void AdvanceHost(double t);
  double DeviceDone() const;  // when everything enqueued so far ends
  Allocation* Find(uintptr_t addr);
  cudaError_t AllocateLocked(void** ptr, size_t bytes, MemKind kind);
  cudaError_t FreeLocked(uintptr_t addr);
  cudaError_t ChargeDevice(uint64_t bytes);  // non-managed device memory, evicting managed pages to make room
  uint64_t Used() const { return nonmanaged_bytes_ + resident_pages_ * kPageBytes; }
  void NoteUsage();
  // Evicts least-recently-used pages until `extra` more bytes fit; false if they cannot.
  bool MakeRoom(uint64_t extra, uint64_t* writebacks);
  void MakeResident(Page* page);
  void Touch(std::span<const Range> ranges, TouchResult* out);
  // Places the write-back of `pages` evicted pages on the device-to-host engine.
  void PlaceWritebacks(uint64_t pages, double ready);
  // Where [p, p + bytes) of a copy lies; false when it is no valid memory (cudaErrorInvalidValue), with the
  // context lost when it is a reserved address without a mapping or access.
  bool Classify(const void* p, size_t bytes, Side* side, const Allocation** alloc);
  // Prefetch and Discard under the lock; `end` gets when the transfer ends.
  cudaError_t PrefetchLocked(std::span<const Range> ranges, cudaMemLocation location, CUstream_st* s, double* end);
  cudaError_t DiscardLocked(std::span<const Range> ranges, CUstream_st* s);
  // The calling thread is held until `end` by a managed-memory call that returns when its transfer has ended.
  void HoldFor(double end);
  // Whether a stream memory operation may address [addr, addr + 4 or 8): device or pinned host memory, aligned.
  cudaError_t CheckValueAddress(uintptr_t addr, bool wide);
  // The context is lost from here on (`why` is said once).
  cudaError_t Lose(cudaError_t error, const std::string& why);
  // Blocks while a stream that an operation on `stream` follows (AwaitAll: any stream) holds a value wait that
  // is not yet true.
  cudaError_t Await(cudaStream_t stream);
  cudaError_t AwaitAll();
  cudaError_t AwaitStreams(cudaStream_t stream, bool all);
  bool Holds(const CUstream_st::ValueWait& w) const;
  void Trace(const char* what, const std::string& detail, double start, double end) const;

  Config config_;
  AddressSpace space_;
  VirtualMemory vmm_{&space_};
  double vmm_free_at_ = 0;  // when the last virtual memory call ends (SpendVmm)
  KernelRegistry kernels_;
  mutable FairMutex mu_;
  std::condition_variable_any value_written_;  // a stream write happened: waits may now hold
  std::atomic<int> waits_pending_{0};
  std::map<uintptr_t, double> written_at_;  // where stream writes wrote, when
  std::map<uintptr_t, std::unique_ptr<Allocation>> allocs_;
  std::list<Page*> lru_;  // resident managed pages, least recently used first
  uint64_t resident_pages_ = 0;
  uint64_t nonmanaged_bytes_ = 0;
  Engine compute_, h2d_, d2h_;
  HostClocks clocks_;
  cudaError_t lost_ = cudaSuccess;  // sticky: the context is lost
  CUstream_st legacy_;
  std::unordered_map<CUstream_st*, std::unique_ptr<CUstream_st>> streams_;
  std::unordered_map<std::thread::id, std::unique_ptr<CUstream_st>> per_thread_;
  std::unordered_map<CUevent_st*, std::unique_ptr<CUevent_st>> events_;
  unsigned long long next_stream_id_ = 1;
  Stats stats_;
};

}  // namespace simcuda
