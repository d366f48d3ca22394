// The device model: allocation and capacity, paging of managed memory, and the virtual time of every operation.
#include "device/device.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

namespace simcuda {
namespace {

constexpr uint64_t kMallocGranularity = 512;  // what a non-managed allocation is charged in
constexpr uint64_t kGiB = 1ull << 30;

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Room for managed memory beyond the device's capacity; the host's RAM is the real limit.
uint64_t ReservationFor(uint64_t capacity) {
  return std::clamp<uint64_t>(4 * capacity, 64 * kGiB, 4096 * kGiB);
}

bool Blocking(const CUstream_st* s) { return (s->flags & cudaStreamNonBlocking) == 0; }

}  // namespace

Device::Device(Config config) : config_(std::move(config)), space_(ReservationFor(config_.capacity_bytes)) {
  legacy_.legacy = true;
  nonmanaged_bytes_ = config_.context_bytes;  // the context's memory: in use from the start, never freed
  NoteUsage();
  if (config_.log >= LogLevel::kInfo) {
    fmt::print(stderr, "simcuda: {} with {} bytes of device memory{}\n", config_.profile.name, config_.capacity_bytes,
               config_.link_overridden ? fmt::format(", host link {:.3g} GB/s to the device, {:.3g} GB/s to the host",
                                                     config_.profile.h2d_bw / 1e9, config_.profile.d2h_bw / 1e9)
                                       : "");
  }
}

Device::~Device() {
  for (auto& [base, a] : allocs_) {
    if (a->kind == MemKind::kPinnedHost) munmap(reinterpret_cast<void*>(a->base), a->span);
  }
}

void Device::Properties(cudaDeviceProp* prop) const {
  const DeviceIdentity& id = IdentityOf(config_.profile);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "%s", id.device_name);
  std::memcpy(prop->uuid.bytes, "simcuda-device-0", 16);
  prop->totalGlobalMem = config_.capacity_bytes;
  prop->sharedMemPerBlock = 48 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->memPitch = 2147483647;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 64 << 10;
  prop->major = id.cc_major;
  prop->minor = id.cc_minor;
  prop->textureAlignment = 512;
  prop->texturePitchAlignment = 32;
  prop->multiProcessorCount = id.sm_count;
  prop->canMapHostMemory = 1;
  prop->concurrentKernels = 1;
  prop->asyncEngineCount = 2;  // one host-to-device and one device-to-host copy engine
  prop->unifiedAddressing = 1;
  prop->memoryBusWidth = 4096;
  prop->l2CacheSize = id.l2_bytes;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->streamPrioritiesSupported = 1;
  prop->globalL1CacheSupported = 1;
  prop->localL1CacheSupported = 1;
  prop->sharedMemPerMultiprocessor = 96 << 10;
  prop->regsPerMultiprocessor = 65536;
  prop->managedMemory = 1;
  prop->concurrentManagedAccess = 1;
  prop->computePreemptionSupported = 1;
  prop->cooperativeLaunch = 1;
  prop->sharedMemPerBlockOptin = 96 << 10;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->hostRegisterSupported = 1;
  prop->memoryPoolsSupported = 1;
  prop->hostNumaId = -1;
}

cudaError_t Device::Attribute(int* value, cudaDeviceAttr attr) const {
  if (value == nullptr) return cudaErrorInvalidValue;
  cudaDeviceProp p;
  Properties(&p);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrAsyncEngineCount: *value = p.asyncEngineCount; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    case cudaDevAttrConcurrentKernels: *value = 1; break;
    case cudaDevAttrCanMapHostMemory: *value = 1; break;
    case cudaDevAttrManagedMemory: *value = 1; break;
    case cudaDevAttrConcurrentManagedAccess: *value = 1; break;
    case cudaDevAttrPageableMemoryAccess: *value = 0; break;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = static_cast<int>(p.sharedMemPerMultiprocessor); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrStreamPrioritiesSupported: *value = 1; break;
    case cudaDevAttrCooperativeLaunch: *value = 1; break;
    case cudaDevAttrHostNumaId: *value = -1; break;
    default:
      // Every other attribute of the enumeration reads as 0 (unsupported feature); beyond it is an error.
      if (attr <= 0 || attr >= cudaDevAttrMax) return cudaErrorInvalidValue;
      *value = 0;
  }
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------------------
// Streams and the clock

CUstream_st* Device::ResolveStream(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return &legacy_;
  if (stream == cudaStreamPerThread) {
    auto& s = per_thread_[std::this_thread::get_id()];
    if (!s) {
      s = std::make_unique<CUstream_st>();
      s->tail = host_time_;
      s->id = next_stream_id_++;
    }
    return s.get();
  }
  auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : it->second.get();
}

bool Device::IsEvent(cudaEvent_t event) const { return event != nullptr && events_.count(event) != 0; }

// The earliest a new operation on `s` may start: after the host enqueued it, after the stream's previous work,
// and across the legacy default stream's implicit synchronization with blocking streams.
double Device::Ready(const CUstream_st* s) const {
  double t = std::max(host_time_, s->tail);
  if (s->legacy) {
    for (const auto& [h, st] : streams_) {
      if (Blocking(st.get())) t = std::max(t, st->tail);
    }
    for (const auto& [tid, st] : per_thread_) t = std::max(t, st->tail);
  } else if (Blocking(s)) {
    t = std::max(t, legacy_.tail);
  }
  return t;
}

void Device::AdvanceHost(double t) {
  if (t <= host_time_) return;
  host_time_ = t;
  compute_.Forget(t);
  h2d_.Forget(t);
  d2h_.Forget(t);
}

double Device::HostTime() {
  std::lock_guard lock(mu_);
  return host_time_;
}

double Device::Now() {
  std::lock_guard lock(mu_);
  double t = std::max({host_time_, legacy_.tail, compute_.last_end(), h2d_.last_end(), d2h_.last_end()});
  for (const auto& [h, s] : streams_) t = std::max(t, s->tail);
  for (const auto& [tid, s] : per_thread_) t = std::max(t, s->tail);
  return t;
}

cudaError_t Device::StreamCreate(cudaStream_t* stream, unsigned flags, int priority) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return cudaErrorInvalidValue;
  std::lock_guard lock(mu_);
  auto s = std::make_unique<CUstream_st>();
  s->flags = flags;
  s->priority = std::clamp(priority, -5, 0);
  s->tail = host_time_;
  s->id = next_stream_id_++;
  *stream = s.get();
  streams_[s.get()] = std::move(s);
  return cudaSuccess;
}

cudaError_t Device::StreamDestroy(cudaStream_t stream) {
  std::lock_guard lock(mu_);
  return streams_.erase(stream) != 0 ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t Device::StreamSynchronize(cudaStream_t stream) {
  std::lock_guard lock(mu_);
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  AdvanceHost(s->tail);
  return cudaSuccess;
}

cudaError_t Device::StreamQuery(cudaStream_t stream) {
  std::lock_guard lock(mu_);
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (s->tail <= host_time_) return cudaSuccess;
  AdvanceHost(host_time_ + kPollSeconds);
  return cudaErrorNotReady;
}

cudaError_t Device::StreamWaitEvent(cudaStream_t stream, cudaEvent_t event) {
  std::lock_guard lock(mu_);
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr || !IsEvent(event)) return cudaErrorInvalidResourceHandle;
  if (event->recorded) s->tail = std::max(s->tail, event->time);
  return cudaSuccess;
}

cudaError_t Device::StreamInfo(cudaStream_t stream, CUstream_st* info) {
  std::lock_guard lock(mu_);
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  *info = *s;
  return cudaSuccess;
}

cudaError_t Device::EventCreate(cudaEvent_t* event, unsigned flags) {
  constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (event == nullptr || (flags & ~kKnown) != 0) return cudaErrorInvalidValue;
  std::lock_guard lock(mu_);
  auto e = std::make_unique<CUevent_st>();
  e->flags = flags;
  *event = e.get();
  events_[e.get()] = std::move(e);
  return cudaSuccess;
}

cudaError_t Device::EventDestroy(cudaEvent_t event) {
  std::lock_guard lock(mu_);
  return events_.erase(event) != 0 ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t Device::EventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard lock(mu_);
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr || !IsEvent(event)) return cudaErrorInvalidResourceHandle;
  event->recorded = true;
  event->time = Ready(s);
  return cudaSuccess;
}

cudaError_t Device::EventSynchronize(cudaEvent_t event) {
  std::lock_guard lock(mu_);
  if (!IsEvent(event)) return cudaErrorInvalidResourceHandle;
  if (event->recorded) AdvanceHost(event->time);
  return cudaSuccess;
}

cudaError_t Device::EventQuery(cudaEvent_t event) {
  std::lock_guard lock(mu_);
  if (!IsEvent(event)) return cudaErrorInvalidResourceHandle;
  if (!event->recorded || event->time <= host_time_) return cudaSuccess;
  AdvanceHost(host_time_ + kPollSeconds);
  return cudaErrorNotReady;
}

cudaError_t Device::EventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(mu_);
  if (!IsEvent(start) || !IsEvent(end)) return cudaErrorInvalidResourceHandle;
  if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
  if (((start->flags | end->flags) & cudaEventDisableTiming) != 0) return cudaErrorInvalidResourceHandle;
  if (std::max(start->time, end->time) > host_time_) return cudaErrorNotReady;
  *ms = static_cast<float>((end->time - start->time) * 1e3);
  return cudaSuccess;
}

cudaError_t Device::Synchronize() {
  const double t = Now();
  std::lock_guard lock(mu_);
  AdvanceHost(t);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------------------
// Memory

Allocation* Device::Find(uintptr_t addr) {
  auto it = allocs_.upper_bound(addr);
  if (it == allocs_.begin()) return nullptr;
  Allocation* a = std::prev(it)->second.get();
  return addr < a->base + std::max<uint64_t>(a->bytes, 1) ? a : nullptr;
}

void Device::NoteUsage() {
  stats_.device_bytes = Used();
  stats_.managed_resident_bytes = resident_pages_ * kPageBytes;
  stats_.peak_device_bytes = std::max(stats_.peak_device_bytes, stats_.device_bytes);
}

bool Device::MakeRoom(uint64_t extra, uint64_t* writebacks) {
  while (Used() + extra > config_.capacity_bytes) {
    if (lru_.empty()) return false;
    Page* victim = lru_.front();
    lru_.pop_front();
    victim->state = PageState::kHost;
    --resident_pages_;
    ++*writebacks;
    stats_.evicted_bytes += kPageBytes;
  }
  NoteUsage();
  return true;
}

void Device::MakeResident(Page* page) {
  page->state = PageState::kDevice;
  lru_.push_back(page);
  page->lru = std::prev(lru_.end());
  ++resident_pages_;
  NoteUsage();
}

void Device::PlaceWritebacks(uint64_t pages, double ready) {
  if (pages == 0) return;
  const double seconds = static_cast<double>(pages * kPageBytes) / config_.profile.d2h_bw;
  const double start = d2h_.Reserve(ready, seconds);
  Trace("evict", fmt::format("{} pages", pages), start, start + seconds);
}

cudaError_t Device::AllocateLocked(void** ptr, size_t bytes, MemKind kind) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  auto a = std::make_unique<Allocation>();
  a->bytes = bytes;
  a->kind = kind;
  if (kind == MemKind::kPinnedHost) {
    a->span = RoundUp(bytes, 4096);
    void* p = mmap(nullptr, a->span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return cudaErrorMemoryAllocation;
    a->base = reinterpret_cast<uintptr_t>(p);
  } else if (kind == MemKind::kManaged) {
    a->span = RoundUp(bytes, kPageBytes);
    a->base = space_.Allocate(a->span, kBlockBytes);
    if (a->base == 0) return cudaErrorMemoryAllocation;
    a->pages.resize(a->span / kPageBytes);
  } else {
    a->charged = RoundUp(bytes, kMallocGranularity);
    if (nonmanaged_bytes_ + a->charged > config_.capacity_bytes) return cudaErrorMemoryAllocation;
    a->span = a->charged;
    a->base = space_.Allocate(a->span, 4096);
    if (a->base == 0) return cudaErrorMemoryAllocation;
    // The driver evicts managed pages to make room for cudaMalloc memory, which is never evicted itself.
    uint64_t writebacks = 0;
    MakeRoom(a->charged, &writebacks);
    PlaceWritebacks(writebacks, host_time_);
    nonmanaged_bytes_ += a->charged;
    NoteUsage();
  }
  *ptr = reinterpret_cast<void*>(a->base);
  allocs_[a->base] = std::move(a);
  return cudaSuccess;
}

cudaError_t Device::Malloc(void** ptr, size_t bytes) {
  std::lock_guard lock(mu_);
  return AllocateLocked(ptr, bytes, MemKind::kDevice);
}

cudaError_t Device::MallocAsync(void** ptr, size_t bytes, cudaStream_t stream) {
  std::lock_guard lock(mu_);
  if (ResolveStream(stream) == nullptr) return cudaErrorInvalidResourceHandle;
  return AllocateLocked(ptr, bytes, MemKind::kDevice);
}

cudaError_t Device::MallocManaged(void** ptr, size_t bytes) {
  std::lock_guard lock(mu_);
  return AllocateLocked(ptr, bytes, MemKind::kManaged);
}

cudaError_t Device::MallocHost(void** ptr, size_t bytes) {
  std::lock_guard lock(mu_);
  return AllocateLocked(ptr, bytes, MemKind::kPinnedHost);
}

cudaError_t Device::FreeLocked(uintptr_t addr) {
  auto it = allocs_.find(addr);
  if (it == allocs_.end() || it->second->kind == MemKind::kPinnedHost) return cudaErrorInvalidValue;
  Allocation* a = it->second.get();
  if (a->kind == MemKind::kManaged) {
    for (Page& p : a->pages) {
      if (p.state != PageState::kDevice) continue;
      lru_.erase(p.lru);
      --resident_pages_;
    }
  } else {
    nonmanaged_bytes_ -= a->charged;
  }
  space_.Release(a->base, a->span);
  allocs_.erase(it);
  NoteUsage();
  return cudaSuccess;
}

cudaError_t Device::Free(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Synchronize();
  std::lock_guard lock(mu_);
  return FreeLocked(reinterpret_cast<uintptr_t>(ptr));
}

cudaError_t Device::FreeAsync(void* ptr, cudaStream_t stream) {
  std::lock_guard lock(mu_);
  if (ResolveStream(stream) == nullptr) return cudaErrorInvalidResourceHandle;
  if (ptr == nullptr) return cudaSuccess;
  // Work already enqueued has executed, so the memory can be reused at once in program order.
  return FreeLocked(reinterpret_cast<uintptr_t>(ptr));
}

cudaError_t Device::FreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard lock(mu_);
  auto it = allocs_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocs_.end() || it->second->kind != MemKind::kPinnedHost) return cudaErrorInvalidValue;
  munmap(ptr, it->second->span);
  allocs_.erase(it);
  return cudaSuccess;
}

void Device::MemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard lock(mu_);
  const uint64_t used = std::min(Used(), config_.capacity_bytes);
  if (free_bytes != nullptr) *free_bytes = config_.capacity_bytes - used;
  if (total_bytes != nullptr) *total_bytes = config_.capacity_bytes;
}

cudaError_t Device::PointerAttributes(cudaPointerAttributes* attr, const void* ptr) {
  if (attr == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(mu_);
  std::memset(attr, 0, sizeof(*attr));
  void* p = const_cast<void*>(ptr);
  const Allocation* a = Find(reinterpret_cast<uintptr_t>(ptr));
  if (a == nullptr) {
    attr->type = cudaMemoryTypeUnregistered;
    attr->device = -2;
    attr->hostPointer = p;
    return cudaSuccess;
  }
  attr->device = 0;
  attr->devicePointer = p;
  switch (a->kind) {
    case MemKind::kDevice: attr->type = cudaMemoryTypeDevice; break;
    case MemKind::kManaged: attr->type = cudaMemoryTypeManaged; attr->hostPointer = p; break;
    case MemKind::kPinnedHost: attr->type = cudaMemoryTypeHost; attr->hostPointer = p; break;
  }
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------------------
// Faults

void Device::Touch(std::span<const Range> ranges, TouchResult* out) {
  const auto& hw = config_.profile;
  for (const Range& r : ranges) {
    uintptr_t addr = r.addr;
    const uintptr_t end = r.addr + r.bytes;
    while (addr < end) {
      Allocation* a = Find(addr);
      if (a == nullptr) {  // a gap between allocations: skip to the next one
        auto next = allocs_.upper_bound(addr);
        if (next == allocs_.end()) break;
        addr = next->first;
        continue;
      }
      const uintptr_t stop = std::min<uintptr_t>(end, a->base + a->bytes);
      if (a->kind == MemKind::kManaged) {
        const size_t first = (addr - a->base) / kPageBytes;
        const size_t last = (stop - 1 - a->base) / kPageBytes;
        for (size_t i = first; i <= last; ++i) {
          Page& page = a->pages[i];
          if (page.state == PageState::kDevice) {
            lru_.splice(lru_.end(), lru_, page.lru);
            out->ready = std::max(out->ready, page.available_at);
            continue;
          }
          double stall = 0;
          if (out->serviced.insert({a, i / kPagesPerBlock}).second) {
            ++stats_.faults;
            stall += hw.fault_latency_s;
          }
          if (page.state == PageState::kHost) {
            stall += static_cast<double>(kPageBytes) / hw.fault_bw;
            stats_.faulted_bytes += kPageBytes;
          }
          uint64_t writebacks = 0;
          const bool fits = MakeRoom(kPageBytes, &writebacks);
          stall += static_cast<double>(writebacks * kPageBytes) / hw.d2h_bw;
          out->writebacks += writebacks;
          out->stall += stall;
          stats_.fault_stall_s += stall;
          if (!fits) continue;  // nothing left to evict: the access is served remotely from the host
          MakeResident(&page);
          out->arrived.push_back(&page);
        }
      }
      addr = stop;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Work

void Device::Trace(const char* what, const std::string& detail, double start, double end) const {
  if (config_.log < LogLevel::kDebug) return;
  fmt::print(stderr, "simcuda: {:<8} {:<40} start {:.9f} end {:.9f}  device {:.1f} MiB\n", what, detail, start, end,
             static_cast<double>(Used()) / (1 << 20));
}

cudaError_t Device::Launch(const CUfunc_st* fn, const LaunchDims& dims, void** args, cudaStream_t stream) {
  if (fn == nullptr || fn->body == nullptr) return cudaErrorInvalidDeviceFunction;
  if (args == nullptr && !fn->param_sizes.empty()) return cudaErrorInvalidValue;
  const dim3 g = dims.grid, b = dims.block;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0 ||
      static_cast<uint64_t>(b.x) * b.y * b.z > 1024) {
    return cudaErrorInvalidConfiguration;
  }
  simcuda_launch launch{args, {g.x, g.y, g.z}, {b.x, b.y, b.z}, dims.shared_bytes};
  std::vector<simcuda_range> declared(16);
  simcuda_cost cost{0, 0, declared.data(), declared.size(), 0};
  if (fn->cost != nullptr) {
    fn->cost(&launch, &cost);
    if (cost.num_ranges > declared.size()) {
      declared.resize(cost.num_ranges);
      cost = simcuda_cost{0, 0, declared.data(), declared.size(), 0};
      fn->cost(&launch, &cost);
    }
  }

  std::lock_guard lock(mu_);
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  std::vector<Range> touched;
  if (cost.num_ranges > 0) {
    for (size_t i = 0; i < std::min(cost.num_ranges, declared.size()); ++i) {
      touched.push_back({reinterpret_cast<uintptr_t>(declared[i].ptr), declared[i].bytes});
    }
  } else {
    // As a recorder would: every pointer-sized parameter that points into an allocation touches all of it.
    for (size_t i = 0; i < fn->param_sizes.size(); ++i) {
      if (fn->param_sizes[i] != sizeof(void*)) continue;
      uintptr_t value;
      std::memcpy(&value, args[i], sizeof(value));
      const Allocation* a = Find(value);
      if (a == nullptr || a->kind == MemKind::kPinnedHost) continue;
      const Range whole{a->base, a->bytes};
      if (std::none_of(touched.begin(), touched.end(), [&](const Range& r) { return r.addr == whole.addr; })) {
        touched.push_back(whole);
      }
    }
  }
  double bytes = cost.bytes;
  if (fn->cost == nullptr) {
    for (const Range& r : touched) bytes += static_cast<double>(r.bytes);
  }
  TouchResult faults;
  Touch(touched, &faults);
  const auto& hw = config_.profile;
  const double seconds =
      hw.kernel_launch_s + std::max(cost.flops / hw.flops_per_s, bytes / hw.memory_bw) + faults.stall;
  const double start = compute_.Reserve(std::max(Ready(s), faults.ready), seconds);
  const double end = start + seconds;
  for (Page* p : faults.arrived) p->available_at = end;
  PlaceWritebacks(faults.writebacks, start);
  s->tail = end;
  ++stats_.kernels;
  Trace("kernel", fn->name, start, end);
  fn->body(&launch);
  return cudaSuccess;
}

cudaError_t Device::LaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return cudaErrorInvalidValue;
  {
    std::lock_guard lock(mu_);
    CUstream_st* s = ResolveStream(stream);
    if (s == nullptr) return cudaErrorInvalidResourceHandle;
    s->tail = Ready(s);
  }
  // Everything before it in the stream has executed; it must not call CUDA, but it may take locks of its own.
  fn(user_data);
  return cudaSuccess;
}

cudaError_t Device::Memcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                           bool blocking) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  std::lock_guard lock(mu_);
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  // With unified addressing the direction follows from the pointers, whatever `kind` says.
  struct Side {
    const Allocation* a;
    bool device;
  };
  auto classify = [&](const void* p, Side* side) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    side->a = Find(addr);
    side->device = side->a != nullptr && side->a->kind != MemKind::kPinnedHost;
    if (side->a == nullptr) return !space_.Contains(addr);  // a freed device range is an error, not host memory
    return addr + bytes <= side->a->base + side->a->bytes;
  };
  Side d{}, sr{};
  if (!classify(dst, &d) || !classify(src, &sr)) return cudaErrorInvalidValue;
  std::vector<Range> managed;
  if (d.a != nullptr && d.a->kind == MemKind::kManaged) managed.push_back({reinterpret_cast<uintptr_t>(dst), bytes});
  if (sr.a != nullptr && sr.a->kind == MemKind::kManaged) managed.push_back({reinterpret_cast<uintptr_t>(src), bytes});
  TouchResult faults;
  Touch(managed, &faults);
  const auto& hw = config_.profile;
  const double b = static_cast<double>(bytes);
  Engine* engine = nullptr;
  double seconds = 0;
  const char* what = "copy";
  if (d.device && sr.device) {
    engine = &compute_;
    seconds = hw.kernel_launch_s + 2 * b / hw.memory_bw;
    what = "d2d";
  } else if (d.device) {
    engine = &h2d_;
    seconds = b / hw.h2d_bw;
    stats_.h2d_bytes += bytes;
    what = "h2d";
  } else if (sr.device) {
    engine = &d2h_;
    seconds = b / hw.d2h_bw;
    stats_.d2h_bytes += bytes;
    what = "d2h";
  }
  seconds += faults.stall;
  const double ready = std::max(Ready(s), faults.ready);
  const double start = engine != nullptr ? engine->Reserve(ready, seconds) : ready;
  const double end = start + seconds;
  for (Page* p : faults.arrived) p->available_at = end;
  PlaceWritebacks(faults.writebacks, start);
  s->tail = end;
  ++stats_.memcpys;
  Trace(what, fmt::format("{} bytes", bytes), start, end);
  std::memmove(dst, src, bytes);
  if (blocking) AdvanceHost(end);
  return cudaSuccess;
}

cudaError_t Device::Memset(void* dst, int value, size_t bytes, cudaStream_t stream, bool blocking) {
  return Fill(dst, static_cast<uint8_t>(value), 1, bytes, stream, blocking);
}

cudaError_t Device::Fill(void* dst, uint32_t value, size_t element_bytes, size_t count, cudaStream_t stream,
                         bool blocking) {
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(dst) % element_bytes != 0 || count > SIZE_MAX / element_bytes) {
    return cudaErrorInvalidValue;
  }
  const size_t bytes = count * element_bytes;
  std::lock_guard lock(mu_);
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (bytes == 0) return cudaSuccess;
  const Allocation* a = Find(reinterpret_cast<uintptr_t>(dst));
  if (a == nullptr || reinterpret_cast<uintptr_t>(dst) + bytes > a->base + a->bytes) return cudaErrorInvalidValue;
  TouchResult faults;
  if (a->kind == MemKind::kManaged) {
    const Range r{reinterpret_cast<uintptr_t>(dst), bytes};
    Touch({&r, 1}, &faults);
  }
  const auto& hw = config_.profile;
  const double seconds = hw.kernel_launch_s + static_cast<double>(bytes) / hw.memory_bw + faults.stall;
  const double start = compute_.Reserve(std::max(Ready(s), faults.ready), seconds);
  const double end = start + seconds;
  for (Page* p : faults.arrived) p->available_at = end;
  PlaceWritebacks(faults.writebacks, start);
  s->tail = end;
  Trace("memset", fmt::format("{} bytes", bytes), start, end);
  if (element_bytes == 1) {
    std::memset(dst, static_cast<int>(value), bytes);
  } else {
    auto* out = static_cast<unsigned char*>(dst);
    for (size_t i = 0; i < count; ++i) std::memcpy(out + i * element_bytes, &value, element_bytes);
  }
  if (blocking) AdvanceHost(end);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------------------
// Managed memory operations

cudaError_t Device::Prefetch(std::span<const Range> ranges, cudaMemLocation location, cudaStream_t stream) {
  bool to_device;
  switch (location.type) {
    case cudaMemLocationTypeDevice:
      if (location.id != 0) return cudaErrorInvalidDevice;
      to_device = true;
      break;
    case cudaMemLocationTypeHost:
    case cudaMemLocationTypeHostNuma:
    case cudaMemLocationTypeHostNumaCurrent:
      to_device = false;
      break;
    default:
      return cudaErrorInvalidValue;
  }
  std::lock_guard lock(mu_);
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  std::vector<Page*> pages;
  for (const Range& r : ranges) {
    if (r.bytes == 0) continue;
    Allocation* a = Find(r.addr);
    if (a == nullptr || a->kind != MemKind::kManaged || r.addr + r.bytes > a->base + a->bytes) {
      return cudaErrorInvalidValue;
    }
    const size_t first = (r.addr - a->base) / kPageBytes;
    const size_t last = (r.addr + r.bytes - 1 - a->base) / kPageBytes;
    for (size_t i = first; i <= last; ++i) pages.push_back(&a->pages[i]);
  }
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());

  const auto& hw = config_.profile;
  double ready = Ready(s);
  double end = ready;
  uint64_t moved = 0;
  if (to_device) {
    // Pages already there become most recently used first, so making room never evicts them.
    for (Page* p : pages) {
      if (p->state == PageState::kDevice) lru_.splice(lru_.end(), lru_, p->lru);
    }
    uint64_t writebacks = 0;
    std::vector<Page*> arrived;
    for (Page* p : pages) {
      if (p->state == PageState::kDevice) continue;
      if (!MakeRoom(kPageBytes, &writebacks)) break;
      if (p->state == PageState::kHost) ++moved;  // unpopulated or discarded pages need no transfer
      MakeResident(p);
      arrived.push_back(p);
    }
    const double seconds = static_cast<double>(moved * kPageBytes) / hw.h2d_bw;
    const double start = h2d_.Reserve(ready, seconds);
    end = start + seconds;
    if (writebacks > 0) {
      const double wb_seconds = static_cast<double>(writebacks * kPageBytes) / hw.d2h_bw;
      end = std::max(end, d2h_.Reserve(ready, wb_seconds) + wb_seconds);
    }
    for (Page* p : arrived) p->available_at = end;
    stats_.prefetched_bytes += moved * kPageBytes;
    Trace("prefetch", fmt::format("{} pages in, {} evicted", moved, writebacks), start, end);
  } else {
    for (Page* p : pages) {
      if (p->state != PageState::kDevice) continue;
      lru_.erase(p->lru);
      --resident_pages_;
      p->state = PageState::kHost;
      ++moved;
    }
    NoteUsage();
    const double seconds = static_cast<double>(moved * kPageBytes) / hw.d2h_bw;
    const double start = d2h_.Reserve(ready, seconds);
    end = start + seconds;
    stats_.prefetched_to_host_bytes += moved * kPageBytes;
    Trace("prefetch", fmt::format("{} pages out", moved), start, end);
  }
  s->tail = end;
  return cudaSuccess;
}

cudaError_t Device::Discard(std::span<const Range> ranges, cudaStream_t stream) {
  std::lock_guard lock(mu_);
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  for (const Range& r : ranges) {
    const Allocation* a = Find(r.addr);
    if (r.bytes != 0 && (a == nullptr || a->kind != MemKind::kManaged || r.addr + r.bytes > a->base + a->bytes)) {
      return cudaErrorInvalidValue;
    }
  }
  for (const Range& r : ranges) {
    if (r.bytes == 0) continue;
    Allocation* a = Find(r.addr);
    std::memset(reinterpret_cast<void*>(r.addr), kPoisonByte, r.bytes);
    stats_.discarded_bytes += r.bytes;
    // Only pages the range covers entirely lose their residency; the end of the allocation counts as covering
    // the rest of its last page.
    const uint64_t from = r.addr - a->base;
    uint64_t to = r.addr + r.bytes - a->base;
    if (to == a->bytes) to = a->span;
    for (uint64_t i = (from + kPageBytes - 1) / kPageBytes; i < to / kPageBytes; ++i) {
      Page& p = a->pages[i];
      if (p.state == PageState::kDevice) {
        lru_.erase(p.lru);
        --resident_pages_;
      }
      p.state = PageState::kDiscarded;
    }
  }
  NoteUsage();
  const double at = Ready(s);
  s->tail = at;
  Trace("discard", fmt::format("{} ranges", ranges.size()), at, at);
  return cudaSuccess;
}

cudaError_t Device::PrefetchBatch(std::span<const Range> ranges, std::span<const cudaMemLocation> locations,
                                  std::span<const size_t> location_starts, bool discard_first,
                                  cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || ranges.empty()) return cudaErrorInvalidValue;
  if (locations.empty() || locations.size() != location_starts.size() || locations.size() > ranges.size() ||
      location_starts[0] != 0) {
    return cudaErrorInvalidValue;
  }
  for (size_t i = 1; i < location_starts.size(); ++i) {
    if (location_starts[i] <= location_starts[i - 1] || location_starts[i] >= ranges.size()) {
      return cudaErrorInvalidValue;
    }
  }
  if (discard_first) {
    const cudaError_t e = Discard(ranges, stream);
    if (e != cudaSuccess) return e;
  }
  for (size_t i = 0; i < locations.size(); ++i) {
    const size_t from = location_starts[i];
    const size_t to = i + 1 < locations.size() ? location_starts[i + 1] : ranges.size();
    const cudaError_t e = Prefetch(ranges.subspan(from, to - from), locations[i], stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t Device::DiscardBatch(std::span<const Range> ranges, cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || ranges.empty()) return cudaErrorInvalidValue;
  return Discard(ranges, stream);
}

cudaError_t Device::Advise(const void* ptr, size_t bytes, cudaMemoryAdvise advice, cudaMemLocation location) {
  if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy) return cudaErrorInvalidValue;
  std::lock_guard lock(mu_);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  const Allocation* a = Find(addr);
  if (a == nullptr || a->kind != MemKind::kManaged || addr + bytes > a->base + a->span) return cudaErrorInvalidValue;
  // Advice is accepted and has no effect on the model: paging follows accesses, prefetches and discards only.
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------------------
// Statistics

Stats Device::GetStats() {
  const double now = Now();
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.virtual_time_s = now;
  s.compute_busy_s = compute_.busy_seconds();
  s.h2d_busy_s = h2d_.busy_seconds();
  s.d2h_busy_s = d2h_.busy_seconds();
  return s;
}

std::string Device::StatsJson() {
  const Stats s = GetStats();
  nlohmann::ordered_json j;
  j["profile"] = config_.profile.name;
  j["capacity_bytes"] = config_.capacity_bytes;
  j["virtual_time_s"] = s.virtual_time_s;
  j["kernels"] = s.kernels;
  j["memcpys"] = s.memcpys;
  j["h2d_bytes"] = s.h2d_bytes;
  j["d2h_bytes"] = s.d2h_bytes;
  j["faults"] = s.faults;
  j["faulted_bytes"] = s.faulted_bytes;
  j["fault_stall_s"] = s.fault_stall_s;
  j["prefetched_bytes"] = s.prefetched_bytes;
  j["prefetched_to_host_bytes"] = s.prefetched_to_host_bytes;
  j["evicted_bytes"] = s.evicted_bytes;
  j["discarded_bytes"] = s.discarded_bytes;
  j["device_bytes"] = s.device_bytes;
  j["peak_device_bytes"] = s.peak_device_bytes;
  j["managed_resident_bytes"] = s.managed_resident_bytes;
  j["compute_busy_s"] = s.compute_busy_s;
  j["h2d_busy_s"] = s.h2d_busy_s;
  j["d2h_busy_s"] = s.d2h_busy_s;
  return j.dump(2);
}

}  // namespace simcuda
