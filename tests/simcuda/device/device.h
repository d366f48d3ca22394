// The simulated GPU: memory and capacity, managed-memory residency, engines and streams on a virtual clock.
#pragma once

#include <cuda_runtime_api.h>

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
#include "device/kernels.h"
#include "device/timeline.h"

// A stream: the time its last operation completes. Created streams are owned by the Device.
struct CUstream_st {
  unsigned flags = 0;  // cudaStreamNonBlocking or 0
  int priority = 0;
  double tail = 0;     // virtual time when everything enqueued so far has completed
  bool legacy = false;
  unsigned long long id = 0;
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

enum class MemKind { kDevice, kManaged, kPinnedHost };

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
  uint64_t h2d_bytes = 0;  // cudaMemcpy* traffic
  uint64_t d2h_bytes = 0;
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
// the virtual clock separately works out when each operation would start and end on a GPU.
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
  cudaError_t MallocHost(void** ptr, size_t bytes);
  cudaError_t Free(void* ptr);  // synchronizes the device first, as cudaFree does
  cudaError_t FreeAsync(void* ptr, cudaStream_t stream);
  cudaError_t FreeHost(void* ptr);
  void MemGetInfo(size_t* free_bytes, size_t* total_bytes);
  cudaError_t PointerAttributes(cudaPointerAttributes* attr, const void* ptr);

  // Copies and fills; `blocking` makes the host wait for completion (cudaMemcpy, cudaMemset).
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

  // Kernels and host functions, in stream order.
  cudaError_t Launch(const CUfunc_st* fn, const LaunchDims& dims, void** args, cudaStream_t stream);
  cudaError_t LaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data);

  // Managed memory: prefetch to a location, discard (no write-back; contents become a NaN pattern).
  cudaError_t Prefetch(std::span<const Range> ranges, cudaMemLocation location, cudaStream_t stream);
  cudaError_t Discard(std::span<const Range> ranges, cudaStream_t stream);
  // The batch forms: locations[i] applies to ranges from location_starts[i] on (cudaMemPrefetchBatchAsync's
  // prefetchLocs / prefetchLocIdxs); the legacy default stream is refused, as the runtime refuses it.
  cudaError_t PrefetchBatch(std::span<const Range> ranges, std::span<const cudaMemLocation> locations,
                            std::span<const size_t> location_starts, bool discard_first, cudaStream_t stream);
  cudaError_t DiscardBatch(std::span<const Range> ranges, cudaStream_t stream);
  cudaError_t Advise(const void* ptr, size_t bytes, cudaMemoryAdvise advice, cudaMemLocation location);

  // The host's position on the virtual clock, and the latest time anything ends.
  double HostTime();
  double Now();
  Stats GetStats();
  std::string StatsJson();

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

  CUstream_st* ResolveStream(cudaStream_t stream);  // null for an unknown handle
  bool IsEvent(cudaEvent_t event) const;
  double Ready(const CUstream_st* s) const;
  void AdvanceHost(double t);
  Allocation* Find(uintptr_t addr);
  cudaError_t AllocateLocked(void** ptr, size_t bytes, MemKind kind);
  cudaError_t FreeLocked(uintptr_t addr);
  uint64_t Used() const { return nonmanaged_bytes_ + resident_pages_ * kPageBytes; }
  void NoteUsage();
  // Evicts least-recently-used pages until `extra` more bytes fit; false if they cannot.
  bool MakeRoom(uint64_t extra, uint64_t* writebacks);
  void MakeResident(Page* page);
  void Touch(std::span<const Range> ranges, TouchResult* out);
  // Places the write-back of `pages` evicted pages on the device-to-host engine.
  void PlaceWritebacks(uint64_t pages, double ready);
  void Trace(const char* what, const std::string& detail, double start, double end) const;

  Config config_;
  AddressSpace space_;
  KernelRegistry kernels_;
  mutable std::mutex mu_;
  std::map<uintptr_t, std::unique_ptr<Allocation>> allocs_;
  std::list<Page*> lru_;  // resident managed pages, least recently used first
  uint64_t resident_pages_ = 0;
  uint64_t nonmanaged_bytes_ = 0;
  Engine compute_, h2d_, d2h_;
  double host_time_ = 0;
  CUstream_st legacy_;
  std::unordered_map<CUstream_st*, std::unique_ptr<CUstream_st>> streams_;
  std::unordered_map<std::thread::id, std::unique_ptr<CUstream_st>> per_thread_;
  std::unordered_map<CUevent_st*, std::unique_ptr<CUevent_st>> events_;
  unsigned long long next_stream_id_ = 1;
  Stats stats_;
};

}  // namespace simcuda
