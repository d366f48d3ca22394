// The device model: allocation and capacity, streams, events, the host clocks, and statistics.
#include "device/device.h"

#include <cuda.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "device/device_internal.h"

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

// The devices alive, so that a thread's exit reaches only those: a test's device may be gone by then.
std::mutex g_live_mu;
std::set<Device*>& Live() {
  static auto* live = new std::set<Device*>;
  return *live;
}

// Tells the devices a thread used that it has exited, so that its clock holds nobody's earliest time back.
// Calls can still come after that on the same thread: the main thread's thread-locals are destroyed before
// exit()'s handlers run (an interposed runtime's shutdown synchronizing an event), so `t_exited`, which needs no
// destructor, says the set is gone.
thread_local bool t_exited = false;
struct ThreadExit {
  std::set<Device*> used;
  ~ThreadExit() {
    t_exited = true;
    std::lock_guard lock(g_live_mu);
    for (Device* d : used) {
      if (Live().count(d) != 0) d->ThreadExited(std::this_thread::get_id());
    }
  }
};
thread_local ThreadExit t_exit;

void UsedBy(Device* d) {
  if (!t_exited) t_exit.used.insert(d);
}

// How long a thread enqueueing behind a stream's value wait waits for another thread to make it true before the
// program is taken for hung (a GPU would wait forever).
constexpr auto kValueWaitLimit = std::chrono::seconds(60);

}  // namespace

Device::Device(Config config) : config_(std::move(config)), space_(ReservationFor(config_.capacity_bytes)) {
  {
    std::lock_guard lock(g_live_mu);
    Live().insert(this);
  }
  legacy_.legacy = true;
  nonmanaged_bytes_ = config_.context_bytes;  // the context's memory: in use from the start, never freed
  NoteUsage();
  if (config_.log >= LogLevel::kInfo) {
    fmt::print(stderr, "simcuda: {} with {} bytes of device memory{}\n", config_.profile.name, config_.capacity_bytes,
               config_.link_overridden ? fmt::format(", host link {:.3g} GB/s to the device, {:.3g} GB/s to the host",
                                                     config_.profile.copy.h2d_bw / 1e9,
                                                     config_.profile.copy.d2h_bw / 1e9)
                                       : "");
  }
}

Device::~Device() {
  {
    std::lock_guard lock(g_live_mu);
    Live().erase(this);
  }
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
    case cudaDevAttrHostRegisterSupported: *value = 1; break;
    default:
      // The driver's attributes of what simcuda implements (the enumerations share their values).
      switch (static_cast<int>(attr)) {
        case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
        case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
          *value = 1;
          return cudaSuccess;
        default: break;
      }
      // Every other attribute of the enumeration reads as 0 (unsupported feature); beyond it is an error.
      if (attr <= 0 || attr >= cudaDevAttrMax) return cudaErrorInvalidValue;
      *value = 0;
  }
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------------------
// Streams and the clock

CUstream_st* Device::ResolveStream(cudaStream_t stream) {
  UsedBy(this);
  if (stream == nullptr || stream == cudaStreamLegacy) return &legacy_;
  if (stream == cudaStreamPerThread) {
    auto& s = per_thread_[std::this_thread::get_id()];
    if (!s) {
      s = std::make_unique<CUstream_st>();
      s->tail = clocks_.Now();
      s->id = next_stream_id_++;
    }
    return s.get();
  }
  auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : it->second.get();
}

cudaError_t Device::Begin(cudaStream_t stream, std::unique_lock<FairMutex>* lock, CUstream_st** s) {
  SIMCUDA_RETURN_IF_ERROR(Await(stream));
  *lock = std::unique_lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  *s = ResolveStream(stream);
  return *s == nullptr ? cudaErrorInvalidResourceHandle : cudaSuccess;
}

bool Device::IsEvent(cudaEvent_t event) const { return event != nullptr && events_.count(event) != 0; }

// The earliest a new operation on `s` may start: after the host enqueued it, after the stream's previous work,
// and across the legacy default stream's implicit synchronization with blocking streams.
double Device::Ready(const CUstream_st* s) {
  UsedBy(this);
  double t = std::max(clocks_.Now(), s->tail);
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

void Device::Spend(double seconds) {
  UsedBy(this);
  clocks_.Spend(seconds);
}

void Device::SpendVmm(const char* what, bool host, uint64_t bytes, double seconds) {
  UsedBy(this);
  const double start = std::max(clocks_.Now(), vmm_free_at_);
  clocks_.Spend(start - clocks_.Now() + seconds);
  vmm_free_at_ = start + seconds;
  ++stats_.vmm_calls;
  stats_.vmm_busy_s += seconds;
  Trace(what, fmt::format("{} bytes {}", bytes, host ? "host" : "device"), start, start + seconds);
}

void Device::AdvanceHost(double t) {
  UsedBy(this);
  if (t <= clocks_.Now()) return;
  clocks_.WaitUntil(t);
  // No thread can enqueue work ready before the earliest clock: the engines may forget what ends before it.
  const double horizon = clocks_.Earliest();
  compute_.Forget(horizon);
  h2d_.Forget(horizon);
  d2h_.Forget(horizon);
}

double Device::DeviceDone() const {
  double t = std::max({legacy_.tail, compute_.last_end(), h2d_.last_end(), d2h_.last_end()});
  for (const auto& [h, s] : streams_) t = std::max(t, s->tail);
  for (const auto& [tid, s] : per_thread_) t = std::max(t, s->tail);
  return t;
}

double Device::HostTime() {
  std::lock_guard lock(mu_);
  UsedBy(this);
  return clocks_.Now();
}

double Device::Now() {
  std::lock_guard lock(mu_);
  return std::max(clocks_.Latest(), DeviceDone());
}

void Device::ThreadExited(std::thread::id id) {
  std::lock_guard lock(mu_);
  clocks_.ThreadExited(id);
}

cudaError_t Device::Lose(cudaError_t error, const std::string& why) {
  if (lost_ == cudaSuccess) {
    lost_ = error;
    fmt::print(stderr, "simcuda: the context is lost ({}): every later call fails\n", why);
  }
  return lost_;
}

// ---------------------------------------------------------------------------------------------------------
// Stream value waits

bool Device::Holds(const CUstream_st::ValueWait& w) const {
  uint64_t v = 0;
  if (w.wide) {
    v = __atomic_load_n(reinterpret_cast<const uint64_t*>(w.addr), __ATOMIC_ACQUIRE);
  } else {
    v = __atomic_load_n(reinterpret_cast<const uint32_t*>(w.addr), __ATOMIC_ACQUIRE);
  }
  const uint64_t mask = w.wide ? ~0ull : 0xffffffffull;
  switch (w.condition) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return w.wide ? static_cast<int64_t>(v - w.value) >= 0
                    : static_cast<int32_t>(static_cast<uint32_t>(v - w.value)) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return v == (w.value & mask);
    case CU_STREAM_WAIT_VALUE_AND: return (v & w.value & mask) != 0;
    case CU_STREAM_WAIT_VALUE_NOR: return (~(v | w.value) & mask) != 0;
    default: return true;
  }
}

cudaError_t Device::Await(cudaStream_t stream) { return AwaitStreams(stream, false); }

cudaError_t Device::AwaitAll() { return AwaitStreams(nullptr, true); }

cudaError_t Device::AwaitStreams(cudaStream_t stream, bool all) {
  if (waits_pending_.load() == 0) return cudaSuccess;
  std::unique_lock lock(mu_);
  if (lost_ != cudaSuccess) return lost_;
  const CUstream_st* target = all ? nullptr : ResolveStream(stream);
  if (!all && target == nullptr) return cudaSuccess;  // an unknown stream: the operation itself says so
  // What an operation on `target` follows: its stream, and across the legacy default stream's implicit
  // synchronization, the legacy stream for a blocking stream and every blocking stream for the legacy one.
  std::vector<CUstream_st*> waiting;
  auto consider = [&](CUstream_st* s) {
    if (!s->waiting) return;
    if (all || s == target || (target->legacy && Blocking(s)) || (s->legacy && Blocking(target))) {
      waiting.push_back(s);
    }
  };
  consider(&legacy_);
  for (auto& [h, s] : streams_) consider(s.get());
  for (auto& [tid, s] : per_thread_) consider(s.get());
  // While this thread waits, another may settle the wait or destroy a created stream.
  auto settled = [&](CUstream_st* s) {
    const bool created = s != &legacy_ && std::none_of(per_thread_.begin(), per_thread_.end(),
                                                       [&](const auto& p) { return p.second.get() == s; });
    return (created && streams_.count(s) == 0) || !s->waiting;  // a destroyed stream is not looked at
  };
  for (CUstream_st* s : waiting) {
    const auto deadline = std::chrono::steady_clock::now() + kValueWaitLimit;
    // Host stores are not seen as they happen: look again every millisecond, and at each stream write.
    while (!settled(s) && !Holds(s->wait)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return Lose(cudaErrorLaunchTimeout,
                    fmt::format("a stream waits on {:#x} for {} s of real time: nothing makes its value true",
                                s->wait.addr, std::chrono::seconds(kValueWaitLimit).count()));
      }
      value_written_.wait_for(lock, std::chrono::milliseconds(1));
      if (lost_ != cudaSuccess) return lost_;
    }
    if (settled(s)) continue;
    // When the value was written: a stream write's own time, else the latest any thread has reached.
    auto w = written_at_.find(s->wait.addr);
    s->tail = std::max(s->tail, w != written_at_.end() ? w->second : clocks_.Latest());
    s->waiting = false;
    --waits_pending_;
    Trace("waited", fmt::format("{:#x}", s->wait.addr), s->tail, s->tail);
  }
  return cudaSuccess;
}

cudaError_t Device::StreamCreate(cudaStream_t* stream, unsigned flags, int priority) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return cudaErrorInvalidValue;
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
  auto s = std::make_unique<CUstream_st>();
  s->flags = flags;
  s->priority = std::clamp(priority, -5, 0);
  s->tail = clocks_.Now();
  s->id = next_stream_id_++;
  *stream = s.get();
  streams_[s.get()] = std::move(s);
  return cudaSuccess;
}

cudaError_t Device::StreamDestroy(cudaStream_t stream) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return cudaErrorInvalidResourceHandle;
  if (it->second->waiting) --waits_pending_;  // what follows the wait can no longer be enqueued
  streams_.erase(it);
  return cudaSuccess;
}

cudaError_t Device::StreamSynchronize(cudaStream_t stream) {
  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
  AdvanceHost(s->tail);
  return cudaSuccess;
}

cudaError_t Device::StreamQuery(cudaStream_t stream) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  if (!s->waiting && s->tail <= clocks_.Now()) return cudaSuccess;
  Spend(kPollSeconds);
  return cudaErrorNotReady;
}

cudaError_t Device::StreamWaitEvent(cudaStream_t stream, cudaEvent_t event) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  CUstream_st* s = ResolveStream(stream);
  if (s == nullptr || !IsEvent(event)) return cudaErrorInvalidResourceHandle;
  Spend(config_.profile.host.order_call_s);
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
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
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
  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
  if (!IsEvent(event)) return cudaErrorInvalidResourceHandle;
  event->recorded = true;
  event->time = Ready(s);
  Spend(config_.profile.host.order_call_s);
  return cudaSuccess;
}

cudaError_t Device::EventSynchronize(cudaEvent_t event) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  if (!IsEvent(event)) return cudaErrorInvalidResourceHandle;
  if (event->recorded) AdvanceHost(event->time);
  return cudaSuccess;
}

cudaError_t Device::EventQuery(cudaEvent_t event) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  if (!IsEvent(event)) return cudaErrorInvalidResourceHandle;
  if (!event->recorded || event->time <= clocks_.Now()) return cudaSuccess;
  Spend(kPollSeconds);
  return cudaErrorNotReady;
}

cudaError_t Device::EventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(mu_);
  if (!IsEvent(start) || !IsEvent(end)) return cudaErrorInvalidResourceHandle;
  if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
  if (((start->flags | end->flags) & cudaEventDisableTiming) != 0) return cudaErrorInvalidResourceHandle;
  if (std::max(start->time, end->time) > clocks_.Now()) return cudaErrorNotReady;
  *ms = static_cast<float>((end->time - start->time) * 1e3);
  return cudaSuccess;
}

cudaError_t Device::Synchronize() {
  SIMCUDA_RETURN_IF_ERROR(AwaitAll());
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  AdvanceHost(DeviceDone());
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
  const double seconds = static_cast<double>(pages * kPageBytes) / config_.profile.managed.d2h_bw;
  const double start = d2h_.Reserve(ready, seconds);
  Trace("evict", fmt::format("{} pages", pages), start, start + seconds);
}

cudaError_t Device::ChargeDevice(uint64_t bytes) {
  if (nonmanaged_bytes_ + bytes > config_.capacity_bytes) return cudaErrorMemoryAllocation;
  // The driver evicts managed pages to make room for other device memory, which is never evicted itself.
  uint64_t writebacks = 0;
  MakeRoom(bytes, &writebacks);
  PlaceWritebacks(writebacks, clocks_.Now());
  nonmanaged_bytes_ += bytes;
  NoteUsage();
  return cudaSuccess;
}

cudaError_t Device::AllocateLocked(void** ptr, size_t bytes, MemKind kind) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
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
    ChargeDevice(a->charged);
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
  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
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
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
  auto it = allocs_.find(addr);
  if (it == allocs_.end() || it->second->kind == MemKind::kPinnedHost ||
      it->second->kind == MemKind::kRegisteredHost) {
    return cudaErrorInvalidValue;
  }
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
  SIMCUDA_RETURN_IF_ERROR(Synchronize());
  std::lock_guard lock(mu_);
  return FreeLocked(reinterpret_cast<uintptr_t>(ptr));
}

cudaError_t Device::FreeAsync(void* ptr, cudaStream_t stream) {
  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
  if (ptr == nullptr) return cudaSuccess;
  // Work already enqueued has executed, so the memory can be reused at once in program order.
  return FreeLocked(reinterpret_cast<uintptr_t>(ptr));
}

cudaError_t Device::FreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
  auto it = allocs_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocs_.end() || it->second->kind != MemKind::kPinnedHost) return cudaErrorInvalidValue;
  munmap(ptr, it->second->span);
  allocs_.erase(it);
  return cudaSuccess;
}

cudaError_t Device::HostRegister(void* ptr, size_t bytes) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  if (ptr == nullptr || bytes == 0 || space_.Contains(addr)) return cudaErrorInvalidValue;
  // Overlapping a pinned or registered range is an error, as the runtime's cudaErrorHostMemoryAlreadyRegistered.
  auto next = allocs_.lower_bound(addr);
  if (next != allocs_.end() && next->first < addr + bytes) return cudaErrorHostMemoryAlreadyRegistered;
  if (Find(addr) != nullptr) return cudaErrorHostMemoryAlreadyRegistered;
  auto a = std::make_unique<Allocation>();
  a->base = addr;
  a->bytes = a->span = bytes;
  a->kind = MemKind::kRegisteredHost;
  allocs_[addr] = std::move(a);
  return cudaSuccess;
}

cudaError_t Device::HostUnregister(void* ptr) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
  auto it = allocs_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocs_.end() || it->second->kind != MemKind::kRegisteredHost) return cudaErrorHostMemoryNotRegistered;
  allocs_.erase(it);
  return cudaSuccess;
}

cudaError_t Device::MemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  const uint64_t used = std::min(Used(), config_.capacity_bytes);
  if (free_bytes != nullptr) *free_bytes = config_.capacity_bytes - used;
  if (total_bytes != nullptr) *total_bytes = config_.capacity_bytes;
  return cudaSuccess;
}

cudaError_t Device::PointerAttributes(cudaPointerAttributes* attr, const void* ptr) {
  if (attr == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  std::memset(attr, 0, sizeof(*attr));
  void* p = const_cast<void*>(ptr);
  const Allocation* a = Find(reinterpret_cast<uintptr_t>(ptr));
  if (a == nullptr) {
    if (const Mapping* m = vmm_.FindMapping(reinterpret_cast<uintptr_t>(ptr))) {
      const bool host = vmm_.ChunkOf(*m).on_host;
      attr->type = host ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
      attr->device = 0;
      attr->devicePointer = p;
      return cudaSuccess;
    }
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
    case MemKind::kPinnedHost:
    case MemKind::kRegisteredHost: attr->type = cudaMemoryTypeHost; attr->hostPointer = p; break;
  }
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
  j["pageable_bytes"] = s.pageable_bytes;
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
  j["managed_calls_blocked_s"] = s.managed_calls_blocked_s;
  j["vmm_calls"] = s.vmm_calls;
  j["vmm_busy_s"] = s.vmm_busy_s;
  return j.dump(2);
}

}  // namespace simcuda
