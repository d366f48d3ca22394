#include "runtime/residency/copy_residency.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "ground/common/log.h"

namespace karma::rt {
namespace {

CUmemAllocationProp ChunkProp(CUmemLocation where) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = where;
  return prop;
}

Status Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  return Internal(fmt::format("{} failed (CUresult {})", what, static_cast<int>(r)));
}

Status Check(cudaError_t r, const char* what) {
  if (r == cudaSuccess) return Status::Ok();
  return Internal(fmt::format("{} failed (cudaError {})", what, static_cast<int>(r)));
}

}  // namespace

Result<std::unique_ptr<CopyResidency>> CopyResidency::Create(const CudaApi& api, int device, uint64_t budget) {
  for (const void* f : {(const void*)api.cuMemGetAllocationGranularity, (const void*)api.cuMemAddressReserve,
                        (const void*)api.cuMemCreate, (const void*)api.cuMemMap, (const void*)api.cuMemSetAccess,
                        (const void*)api.cuMemcpyAsync, (const void*)api.cuStreamWaitValue32_v2,
                        (const void*)api.cuStreamWriteValue32_v2, (const void*)api.cudaMalloc}) {
    if (f == nullptr) return Unsupported("the driver has no virtual memory management API");
  }
  std::unique_ptr<CopyResidency> r(new CopyResidency(api, device, budget));
  if (Status st = r->Init(); !st.ok()) return st;
  return r;
}

CopyResidency::CopyResidency(const CudaApi& api, int device, uint64_t budget)
    : api_(api), device_(device), budget_(budget) {}

Status CopyResidency::Init() {
  LastErrorScope errors(api_);
  const CUmemAllocationProp prop = ChunkProp({CU_MEM_LOCATION_TYPE_DEVICE, device_});
  size_t g = 0;
  if (Status st = Check(api_.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                        "cuMemGetAllocationGranularity");
      !st.ok()) {
    return Unsupported(st.message());
  }
  granularity_ = g;
  max_chunks_ = budget_ / granularity_;
  // Host chunks must be possible: they are where the bytes go. Drivers that take no plain host location may take
  // the device's host NUMA node.
  auto probe = NewChunk(true);
  if (!probe.ok()) {
    int node = -1;
    if (api_.cuDeviceGetAttribute == nullptr ||
        api_.cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device_) != CUDA_SUCCESS || node < 0) {
      node = 0;
    }
    host_location_ = {CU_MEM_LOCATION_TYPE_HOST_NUMA, node};
    auto numa = NewChunk(true);
    if (!numa.ok()) {
      return Unsupported(fmt::format("host chunks through the virtual memory API: {}; on host NUMA node {}: {}",
                                     probe.status().message(), node, numa.status().message()));
    }
    probe = std::move(numa);
  }
  api_.cuMemUnmap(probe->staging, granularity_);
  api_.cuMemAddressFree(probe->staging, granularity_);
  api_.cuMemRelease(probe->handle);
  constexpr size_t kFlagStride = 64 / sizeof(uint32_t);
  if (Status st = Check(api_.cudaMalloc(&flags_, kLanes * kFlagStride * sizeof(uint32_t)), "cudaMalloc"); !st.ok()) {
    return st;
  }
  for (uint32_t l = 0; l < kLanes; ++l) {
    LaneState& lane = lanes_[l];
    lane.flag = static_cast<uint32_t*>(flags_) + l * kFlagStride;
    if (Status st = Check(api_.cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking), "cudaStreamCreate");
        !st.ok()) {
      return st;
    }
    for (cudaStream_t* st_of : {&lane.bridge, &lane.gate, &lane.signal}) {
      if (Status st = Check(api_.cudaStreamCreateWithFlags(st_of, cudaStreamNonBlocking), "cudaStreamCreate");
          !st.ok()) {
        return st;
      }
    }
  }
  if (Status st = Check(api_.cudaStreamCreateWithFlags(&host_.stream, cudaStreamNonBlocking),
                        "cudaStreamCreate");
      !st.ok()) {
    return st;
  }
  // The flags start at 0, written and waited on as the moves will (which is also whether the driver can).
  for (LaneState& lane : lanes_) {
    const CUdeviceptr flag = reinterpret_cast<CUdeviceptr>(lane.flag);
    for (Status st : {Check(api_.cuStreamWriteValue32_v2(lane.signal, flag, 0, 0), "cuStreamWriteValue32"),
                      Check(api_.cudaStreamSynchronize(lane.signal), "cudaStreamSynchronize"),
                      Check(api_.cuStreamWaitValue32_v2(lane.bridge, flag, 0, CU_STREAM_WAIT_VALUE_GEQ),
                            "cuStreamWaitValue32"),
                      Check(api_.cudaStreamSynchronize(lane.bridge), "cudaStreamSynchronize")}) {
      if (!st.ok()) return Unsupported("stream memory operations on device memory: " + st.message());
    }
  }
  for (uint32_t l = 0; l < kLanes; ++l) {
    lanes_[l].thread = std::thread([this, l] { Run(static_cast<Lane>(l)); });
    lanes_[l].finisher = std::thread([this, l] { RunFinisher(static_cast<Lane>(l)); });
  }
  host_.thread = std::thread([this] { RunHostMaps(); });
  return Status::Ok();
}

CopyResidency::~CopyResidency() {
  Finish();
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (LaneState& lane : lanes_) {
    if (lane.thread.joinable()) lane.thread.join();
    if (lane.finisher.joinable()) lane.finisher.join();
  }
  if (host_.thread.joinable()) host_.thread.join();
  if (host_.stream != nullptr) api_.cudaStreamDestroy(host_.stream);
  while (!reservations_.empty()) Release(reservations_.begin()->first);
  for (Chunk& c : pool_) {
    if (c.given != nullptr) api_.cudaEventDestroy(c.given);
    if (c.copied != nullptr) api_.cudaEventDestroy(c.copied);
    api_.cuMemUnmap(c.staging, granularity_);
    api_.cuMemAddressFree(c.staging, granularity_);
    api_.cuMemRelease(c.handle);
  }
  for (LaneState& lane : lanes_) {
    if (lane.stream != nullptr) api_.cudaStreamDestroy(lane.stream);
    if (lane.bridge != nullptr) api_.cudaStreamDestroy(lane.bridge);
    if (lane.gate != nullptr) api_.cudaStreamDestroy(lane.gate);
    if (lane.signal != nullptr) api_.cudaStreamDestroy(lane.signal);
    for (cudaEvent_t e : lane.spare) api_.cudaEventDestroy(e);
  }
  if (flags_ != nullptr) api_.cudaFree(flags_);
}

Result<CopyResidency::Chunk> CopyResidency::NewChunk(bool on_host) {
  const CUmemAllocationProp prop =
      ChunkProp(on_host ? host_location_ : CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device_});
  Chunk c;
  const CUresult created = vmm_([&] { return api_.cuMemCreate(&c.handle, granularity_, &prop, 0); });
  if (Status st = Check(created, "cuMemCreate"); !st.ok()) return st;
  CUdeviceptr va = 0;
  if (Status st = Check(api_.cuMemAddressReserve(&va, granularity_, granularity_, 0, 0), "cuMemAddressReserve");
      !st.ok()) {
    api_.cuMemRelease(c.handle);
    return st;
  }
  c.staging = va;
  if (Status st = MapOnto(va, c.handle); !st.ok()) {
    api_.cuMemAddressFree(va, granularity_);
    api_.cuMemRelease(c.handle);
    return st;
  }
  return c;
}

Status CopyResidency::MapOnto(uint64_t addr, CUmemGenericAllocationHandle handle, bool access) {
  const CUresult mapped = vmm_([&] { return api_.cuMemMap(addr, granularity_, 0, handle, 0); });
  if (Status st = Check(mapped, "cuMemMap"); !st.ok()) return st;
  return access ? SetAccess(addr, granularity_) : Status::Ok();
}

void CopyResidency::SetAccessRuns(std::vector<uint64_t> granules) {
  std::sort(granules.begin(), granules.end());
  for (size_t i = 0; i < granules.size();) {
    size_t j = i + 1;
    while (j < granules.size() && granules[j] == granules[j - 1] + granularity_) ++j;
    Fail(SetAccess(granules[i], (j - i) * granularity_));
    i = j;
  }
}

Status CopyResidency::SetAccess(uint64_t addr, uint64_t bytes) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return Check(vmm_([&] { return api_.cuMemSetAccess(addr, bytes, &access, 1); }), "cuMemSetAccess");
}

void CopyResidency::Undrop(Granule* g) {
  if (g->dropped_as != 0) dropped_.erase(g->dropped_as);
  g->dropped_as = 0;
  g->dead.reset();
}

Status CopyResidency::EnsureHostChunk(Granule* g) {
  if (g->host.handle != 0) return Status::Ok();
  auto c = NewChunk(true);
  if (!c.ok()) return c.status();
  g->host = *c;
  return Status::Ok();
}

int CopyResidency::TakeDeviceChunk(std::unique_lock<std::mutex>& lock) {
  while (true) {
    if (!free_chunks_.empty()) {
      const int c = free_chunks_.back();
      free_chunks_.pop_back();
      return c;
    }
    if (pool_.size() < max_chunks_) {
      auto c = NewChunk(false);
      if (!c.ok()) return -1;  // the device has less than the budget free: the granule stays on the host
      pool_.push_back(*c);
      peak_chunks_ = std::max<uint64_t>(peak_chunks_, pool_.size());
      return static_cast<int>(pool_.size() - 1);
    }
    if (const int c = TakeDroppedChunk(lock); c >= 0) return c;
    // At the budget: only an eviction or drop in flight can give a chunk back, unless it waits for a move that
    // waits for this one.
    bool coming = false;
    for (Lane l : {kOut, kDead}) coming = coming || (LaneBusy(l) && !blocked_[l]);
    if (stopping_ || !coming) return -1;
    if (cv_.wait_for(lock, kStall) == std::cv_status::timeout) LogStall("a fetch or make waits for a device chunk");
  }
}

void CopyResidency::LogStall(const char* what) const {
  std::string lanes;
  for (uint32_t l = 0; l < kLanes; ++l) {
    lanes += fmt::format(" {}:{} queued {} running{}", l, lanes_[l].jobs.size(), running_[l],
                         blocked_[l] ? " blocked" : "");
  }
  KARMA_LOG(kWarn, "copy residency: {} for {} s; lanes{}; {} of {} chunks free, at most {}; host mapper {} queued{}",
            what, kStall.count(), lanes, free_chunks_.size(), pool_.size(), max_chunks_, host_.work.size(),
            host_.busy ? ", busy" : "");
}

void CopyResidency::RecordOn(cudaEvent_t* event, cudaStream_t on) {
  if (*event == nullptr) {
    Fail(Check(api_.cudaEventCreateWithFlags(event, cudaEventDisableTiming), "cudaEventCreate"));
  }
  if (*event != nullptr) Fail(Check(api_.cudaEventRecord(*event, on), "cudaEventRecord"));
}

void CopyResidency::Released(int chunk, cudaStream_t on) {
  RecordOn(&pool_[chunk].given, on);
  pool_[chunk].releasing = false;
}

void CopyResidency::GiveBack(int chunk) {
  free_chunks_.push_back(chunk);
  cv_.notify_all();
}

CopyResidency::Granule* CopyResidency::Find(uint64_t addr) {
  return const_cast<Granule*>(static_cast<const CopyResidency*>(this)->Find(addr));
}

const CopyResidency::Granule* CopyResidency::Find(uint64_t addr) const {
  auto it = reservations_.upper_bound(addr);
  if (it == reservations_.begin()) return nullptr;
  --it;
  if (addr >= it->first + it->second.bytes) return nullptr;
  return &it->second.granules[(addr - it->first) / granularity_];
}

Result<uint64_t> CopyResidency::Reserve(uint64_t bytes, bool on_device) {
  LastErrorScope errors(api_);
  bytes = (bytes + granularity_ - 1) / granularity_ * granularity_;
  CUdeviceptr va = 0;
  if (Status st = Check(api_.cuMemAddressReserve(&va, bytes, granularity_, 0, 0), "cuMemAddressReserve"); !st.ok()) {
    errors.Failed();
    return st;
  }
  std::unique_lock lock(mu_);
  Reservation& r = reservations_[va];
  r.bytes = bytes;
  r.granules.resize(bytes / granularity_);
  for (size_t i = 0; i < r.granules.size(); ++i) {
    Granule& g = r.granules[i];
    const uint64_t addr = va + i * granularity_;
    // Without `on_device`, unmapped until made. Else on the device while the pool has room now (nothing in flight
    // is waited for), then on the host.
    if (!on_device) continue;
    int c = kOnHost;
    if (!free_chunks_.empty() || pool_.size() < max_chunks_) c = TakeDeviceChunk(lock);
    if (c >= 0 && pool_[c].releasing) cv_.wait(lock, [&] { return !pool_[c].releasing; });
    Status st = c >= 0 ? MapOnto(addr, pool_[c].handle) : EnsureHostChunk(&g);
    if (st.ok() && c < 0) st = MapOnto(addr, g.host.handle);
    if (!st.ok()) {
      if (c >= 0) GiveBack(c);
      lock.unlock();
      errors.Failed();
      Release(va);
      return st;
    }
    g.device = c < 0 ? kOnHost : c;
  }
  return static_cast<uint64_t>(va);
}

void CopyResidency::Release(uint64_t addr) {
  std::lock_guard lock(mu_);
  auto it = reservations_.find(addr);
  if (it == reservations_.end()) return;
  for (size_t i = 0; i < it->second.granules.size(); ++i) {
    Granule& g = it->second.granules[i];
    if (g.device != kUnmapped && g.device != kToHost) api_.cuMemUnmap(addr + i * granularity_, granularity_);
    if (g.device == kToUnmap) g.device = kUnmapped;  // the host mapper releases its chunk
    Undrop(&g);
    if (g.device >= 0) GiveBack(g.device);
    if (g.host.handle != 0) {
      api_.cuMemUnmap(g.host.staging, granularity_);
      api_.cuMemAddressFree(g.host.staging, granularity_);
      api_.cuMemRelease(g.host.handle);
    }
  }
  api_.cuMemAddressFree(addr, it->second.bytes);
  reservations_.erase(it);
}

ResidencyTicket CopyResidency::One(Kind kind, ResidencyRange r, std::span<const cudaEvent_t> after, bool held) {
  switch (kind) {
    case Kind::kEvict: break;
    case Kind::kFetch:
      if (Resident(r)) return {kIn, 0};  // on the device already, nothing in flight: nothing to do
      break;
    case Kind::kDrop:
      // A dead value keeps its chunk until someone needs it: an allocation placed there, or the make before a
      // recompute, then revives it in place without a remap. A held value's chunk is taken before a freed one's.
      if (DropOrReviveInPlace(Kind::kDrop, r, after, held)) return {kDead, 0};
      break;
    case Kind::kMake:
      if (DropOrReviveInPlace(Kind::kMake, r, after)) return {kNew, 0};
      break;
  }
  return Post(kind, r, after);
}

ResidencyTicket CopyResidency::Each(Kind kind, std::span<const ResidencyRange> rs, std::span<const cudaEvent_t> after,
                                    bool held, const MoveEvents& events) {
  ResidencyTicket last;
  for (const ResidencyRange& r : rs) {
    if (r.bytes == 0) continue;
    const ResidencyTicket t = One(kind, r, after, held);
    if (t.seq != 0) last = t;
  }
  // The moves of one kind run in one lane, in order: the last one's completion is all of theirs.
  if (last.seq != 0 && events.done != nullptr && !RecordDone(last, events.done).ok()) return {last.lane, 0};
  return last;
}

ResidencyTicket CopyResidency::Evict(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                                     const MoveEvents& events) {
  return Each(Kind::kEvict, r, after, false, events);
}
ResidencyTicket CopyResidency::Fetch(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                                     const MoveEvents& events) {
  return Each(Kind::kFetch, r, after, false, events);
}
ResidencyTicket CopyResidency::Drop(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after, bool held,
                                    std::optional<cudaStream_t> /*user: later moves of the range come after it*/) {
  return Each(Kind::kDrop, r, after, held, {});
}
ResidencyTicket CopyResidency::Make(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                                    std::optional<cudaStream_t> /*user: waits for the ticket*/) {
  return Each(Kind::kMake, r, after, false, {});
}

bool CopyResidency::DropOrReviveInPlace(Kind kind, ResidencyRange r, std::span<const cudaEvent_t> after,
                                        bool held) {
  std::shared_ptr<CUevent_st> dead;
  if (kind == Kind::kDrop) {
    // One event for the drop's granules, after `after`, on the drop lane's gate (the caller's may be re-recorded).
    LastErrorScope errors(api_);
    cudaEvent_t e = nullptr;
    const cudaStream_t s = lanes_[kDead].gate;
    for (cudaEvent_t w : after) {
      if (w != nullptr && api_.cudaStreamWaitEvent(s, w, 0) != cudaSuccess) errors.Failed();
    }
    if (api_.cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      errors.Failed();
      return false;
    }
    dead = std::shared_ptr<CUevent_st>(e, [api = &api_](cudaEvent_t x) { api->cudaEventDestroy(x); });
    if (api_.cudaEventRecord(e, s) != cudaSuccess) errors.Failed();
  }
  std::lock_guard lock(mu_);
  for (uint64_t a = r.addr; a < r.addr + r.bytes; a += granularity_) {
    const Granule* g = Find(a);
    if (g != nullptr && (g->posted != g->completed || (kind == Kind::kMake && g->device < 0))) return false;
  }
  for (uint64_t a = r.addr; a < r.addr + r.bytes; a += granularity_) {
    Granule* g = Find(a);
    if (g == nullptr) continue;
    Undrop(g);
    g->dead = dead;  // off the device too: a make waits for the old value's last use
    if (dead != nullptr && g->device >= 0) {
      g->dropped_as = ++drops_ + (held ? 0 : kFreedDrops);
      dropped_.emplace(g->dropped_as, a);
    }
  }
  cv_.notify_all();  // a fetch waiting for room may take a dropped chunk
  return true;
}

int CopyResidency::TakeDroppedChunk(std::unique_lock<std::mutex>& lock) {
  while (!dropped_.empty()) {
    // The first dropped granule with no move pending whose value is dead by now; else wait for the first one's.
    Granule* pick = nullptr;
    uint64_t pick_addr = 0;
    std::shared_ptr<CUevent_st> wait_for;
    for (const auto& [n, a] : dropped_) {
      Granule* g = Find(a);
      if (g == nullptr || g->dead == nullptr || g->posted != g->completed) continue;
      if (api_.cudaEventQuery(g->dead.get()) == cudaSuccess) {
        pick = g;
        pick_addr = a;
        break;
      }
      if (wait_for == nullptr) wait_for = g->dead;
    }
    if (pick == nullptr) {
      if (wait_for == nullptr) return -1;
      lock.unlock();
      api_.cudaEventSynchronize(wait_for.get());
      lock.lock();
      continue;
    }
    // Its value is dead: the addresses will lead nowhere until a make (a use nobody foresaw faults, loudly). The
    // host mapper unmaps them (a move of the granule: a make of it waits); a make maps the chunk meanwhile.
    const int chunk = pick->device;
    host_.work.push_back({pick_addr, chunk, pick->dead});
    pick->device = kToUnmap;
    ++pick->posted;
    Undrop(pick);
    pool_[chunk].releasing = true;
    cv_.notify_all();
    return chunk;
  }
  return -1;
}

ResidencyTicket CopyResidency::Post(Kind kind, ResidencyRange r, std::span<const cudaEvent_t> after) {
  const Lane lane = kind == Kind::kEvict ? kOut : kind == Kind::kFetch ? kIn : kind == Kind::kMake ? kNew : kDead;
  LaneState& l = lanes_[lane];
  Job job{kind, nullptr, 0, {}};
  {
    // `after`'s position now: the lane's gate waits for it, and the job's own event marks it there (the lane's
    // stream waits for that event when the job runs, and so for nothing posted after it). With no `after`, the
    // event marks when the job was posted: a lane's thread never starts it before, on a simulated clock too.
    LastErrorScope errors(api_);
    for (cudaEvent_t e : after) {
      if (e != nullptr && api_.cudaStreamWaitEvent(l.gate, e, 0) != cudaSuccess) errors.Failed();
    }
    if (api_.cudaEventCreateWithFlags(&job.after, cudaEventDisableTiming) != cudaSuccess ||
        api_.cudaEventRecord(job.after, l.gate) != cudaSuccess) {
      errors.Failed();
    }
  }
  std::lock_guard lock(mu_);
  const uint64_t data_end = r.addr + std::min(r.data, r.bytes);
  for (uint64_t a = r.addr; a < r.addr + r.bytes; a += granularity_) {
    const uint64_t data = data_end > a ? std::min(data_end - a, granularity_) : 0;
    if (Granule* g = Find(a)) job.granules.push_back({a, ++g->posted, data});
  }
  job.seq = ++l.issued;
  l.jobs.push_back(std::move(job));
  cv_.notify_all();
  return {static_cast<uint32_t>(lane), l.issued};
}

void CopyResidency::Run(Lane lane) {
  api_.cudaSetDevice(device_);
  LaneState& l = lanes_[lane];
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return (stopping_ && l.jobs.empty()) || (!l.jobs.empty() && l.started.size() < kInFlight); });
    if (l.jobs.empty()) return;
    Job job = std::move(l.jobs.front());
    l.jobs.pop_front();
    ++running_[lane];
    l.started.push_back(StartJob(lane, std::move(job), lock));
    cv_.notify_all();
  }
}

void CopyResidency::RunFinisher(Lane lane) {
  api_.cudaSetDevice(device_);
  LaneState& l = lanes_[lane];
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return !l.started.empty() || (stopping_ && l.jobs.empty() && running_[lane] == 0); });
    if (l.started.empty()) return;
    Started started = std::move(l.started.front());
    l.started.pop_front();
    FinishJob(lane, started, lock);
    SignalLocked(lane, started.job.seq);
    --running_[lane];
    ++finished_;
    cv_.notify_all();
  }
}

void CopyResidency::SignalLocked(Lane lane, uint32_t seq) {
  // A write on a stream of its own, which never waits: the device sees it when the thread made it.
  LaneState& l = lanes_[lane];
  // The move is complete: the host knows first, so that whoever the device's write releases finds it done.
  l.done.store(seq, std::memory_order_release);
  Fail(Check(api_.cuStreamWriteValue32_v2(l.signal, reinterpret_cast<CUdeviceptr>(l.flag), seq, 0),
             "cuStreamWriteValue32"));
}

CopyResidency::Started CopyResidency::StartJob(Lane lane, Job job, std::unique_lock<std::mutex>& lock) {
  LaneState& l = lanes_[lane];
  const bool copies = job.kind == Kind::kEvict || job.kind == Kind::kFetch;
  const bool to_device = lane == kIn || lane == kNew;
  Started started;
  std::vector<std::pair<uint64_t, int>>& moved = started.moved;
  if (job.after != nullptr) {
    Fail(Check(api_.cudaStreamWaitEvent(l.stream, job.after, 0), "cudaStreamWaitEvent"));
    api_.cudaEventDestroy(job.after);
    job.after = nullptr;
  }
  // A granule's previous move (on any lane) is complete on the device too before this one starts: its lane waited
  // for its copies before it counted it completed (FinishJob).
  for (const GranuleOrder& go : job.granules) {
    Granule* g = Find(go.addr);
    if (g != nullptr && g->completed + 1 != go.order) {
      blocked_[lane] = true;  // a fetch waiting for a chunk must not wait for this lane now
      cv_.notify_all();
      cv_.wait(lock, [&] { return stopping_ || g->completed + 1 == go.order; });
      blocked_[lane] = false;
    }
    if (g == nullptr || stopping_) continue;
    if (g->dead != nullptr && (to_device || job.kind == Kind::kEvict)) {
      // Revived (a make), or given a value after all: after the dead value's last use.
      Fail(Check(api_.cudaStreamWaitEvent(l.stream, g->dead.get(), 0), "cudaStreamWaitEvent"));
      Undrop(g);
    }
    const int was = g->device;
    if (!status().ok() || (was >= 0) == to_device) {
      moved.emplace_back(go.addr, kStay);
    } else if (to_device) {
      const int c = TakeDeviceChunk(lock);
      if (c >= 0 && !copies) {
        // Mapped once the old value is copied out; the make completes after the old granule's unmap (FinishJob).
        if (pool_[c].copied != nullptr) {
          Fail(Check(api_.cudaStreamWaitEvent(l.stream, pool_[c].copied, 0), "cudaStreamWaitEvent"));
        }
        started.after_given.push_back(c);
      } else if (c >= 0 && pool_[c].releasing) {
        cv_.wait(lock, [&] { return !pool_[c].releasing; });  // nothing is copied into it before the unmap
      }
      if (c >= 0 && copies && pool_[c].given != nullptr) {
        Fail(Check(api_.cudaStreamWaitEvent(l.stream, pool_[c].given, 0), "cudaStreamWaitEvent"));
      }
      if (c >= 0 && copies && was == kOnHost && go.data > 0) {
        Fail(Check(api_.cuMemcpyAsync(pool_[c].staging, g->host.staging, go.data, l.stream), "copy in"));
      }
      if (c < 0) stranded_.fetch_add(1, std::memory_order_relaxed);
      // No chunk to be had: the bytes stay on (or an unmapped granule gets) its host chunk: correct, slow.
      if (c < 0 && was == kUnmapped && !Fail(EnsureHostChunk(g))) {
        moved.emplace_back(go.addr, kOnHost);
      } else {
        moved.emplace_back(go.addr, c >= 0 ? c : kStay);
      }
    } else if (job.kind != Kind::kEvict) {
      moved.emplace_back(go.addr, kUnmapped);  // a drop: the value is dead, nothing to keep
    } else if (Fail(EnsureHostChunk(g))) {
      moved.emplace_back(go.addr, kStay);
    } else {
      if (go.data > 0) {
        Fail(Check(api_.cuMemcpyAsync(g->host.staging, pool_[was].staging, go.data, l.stream), "copy out"));
      }
      moved.emplace_back(go.addr, kOnHost);
    }
  }
  // Its copies done and `after` passed: the granules can be remapped (FinishJob).
  if (!l.spare.empty()) {
    started.done = l.spare.back();
    l.spare.pop_back();
  } else {
    Fail(Check(api_.cudaEventCreateWithFlags(&started.done, cudaEventDisableTiming), "cudaEventCreate"));
  }
  if (started.done != nullptr) Fail(Check(api_.cudaEventRecord(started.done, l.stream), "cudaEventRecord"));
  started.job = std::move(job);
  return started;
}

void CopyResidency::FinishJob(Lane lane, Started& started, std::unique_lock<std::mutex>& lock) {
  if (started.done != nullptr) {
    lock.unlock();
    Fail(Check(api_.cudaEventSynchronize(started.done), "cudaEventSynchronize"));
    lock.lock();
    lanes_[lane].spare.push_back(started.done);
  }
  // The remaps are read off under the lock, made outside it (the granules are in flight, so no other thread changes
  // their mappings or state until they are counted completed, and a caller's thread never waits behind a remap), and
  // recorded under it again.
  struct Remap {
    Granule* g;
    uint64_t addr;
    int old, to;
    CUmemGenericAllocationHandle onto;
  };
  std::vector<Remap> remaps;
  for (const auto& [addr, to] : started.moved) {
    if (Granule* g = Find(addr)) {
      remaps.push_back({g, addr, g->device, to, to >= 0 ? pool_[to].handle : to == kOnHost ? g->host.handle : 0});
      // Its device chunk goes back before the unmap: a make may map it meanwhile (Chunk::releasing).
      if (to != kStay && g->device >= 0) {
        pool_[g->device].releasing = true;
        RecordOn(&pool_[g->device].copied, lanes_[lane].signal);
        free_chunks_.push_back(g->device);
      }
    }
  }
  if (!remaps.empty()) cv_.notify_all();
  lock.unlock();
  std::vector<uint64_t> mapped;
  for (const Remap& r : remaps) {
    if (r.to == kStay) continue;
    if (r.old != kUnmapped) Fail(Check(vmm_([&] { return api_.cuMemUnmap(r.addr, granularity_); }), "cuMemUnmap"));
    // An evicted granule is mapped onto its host chunk by the host mapper, once its device chunk is back.
    if (r.to == kUnmapped || (r.to == kOnHost && r.old >= 0)) continue;
    Fail(MapOnto(r.addr, r.onto, /*access=*/false));
    mapped.push_back(r.addr);
  }
  SetAccessRuns(std::move(mapped));
  lock.lock();
  for (const Remap& r : remaps) {
    if (r.to != kStay) {
      Undrop(r.g);
      r.g->device = r.to == kOnHost && r.old >= 0 ? kToHost : r.to;
      if (r.old >= 0) Released(r.old, lanes_[lane].signal);
      if (r.g->device == kToHost) {
        host_.work.push_back({r.addr, -1, nullptr});  // the host mapper counts the move completed
        continue;
      }
    }
    ++r.g->completed;
  }
  // A chunk this job took while its old granule was being unmapped: the job completes after that unmap (its flag
  // is written on the signal stream, which waits for the unmap's event).
  for (int c : started.after_given) {
    cv_.wait(lock, [&] { return !pool_[c].releasing; });
    if (pool_[c].given != nullptr) {
      Fail(Check(api_.cudaStreamWaitEvent(lanes_[lane].signal, pool_[c].given, 0), "cudaStreamWaitEvent"));
    }
  }
  cv_.notify_all();
}

void CopyResidency::RunHostMaps() {
  api_.cudaSetDevice(device_);
  std::unique_lock lock(mu_);
  while (true) {
    // Also the watchdog: moves in flight that no lane finishes for kStall are logged (a hang says where it is).
    for (uint64_t seen = finished_; !cv_.wait_for(lock, kStall, [&] { return stopping_ || !host_.work.empty(); });
         seen = finished_) {
      bool moving = false;
      for (uint32_t l = 0; l < kLanes; ++l) moving = moving || LaneBusy(l);
      if (moving && seen == finished_) LogStall("moves are in flight and none finished");
    }
    if (host_.work.empty()) return;
    std::vector<std::pair<Granule*, HostWork>> batch;
    for (HostWork& w : host_.work) {
      Granule* g = Find(w.addr);
      if (g != nullptr && g->device != (w.chunk >= 0 ? kToUnmap : kToHost)) g = nullptr;  // released meanwhile
      batch.emplace_back(g, std::move(w));
    }
    host_.work.clear();
    host_.busy = true;  // Finish waits for the batch
    lock.unlock();
    std::vector<uint64_t> mapped;
    for (const auto& [g, w] : batch) {
      if (g == nullptr) continue;
      if (w.chunk < 0) {
        Fail(MapOnto(w.addr, g->host.handle, /*access=*/false));
        mapped.push_back(w.addr);
        continue;
      }
      // After the dead value's last use, on this thread's clock too (on a GPU it has long completed).
      if (w.dead != nullptr) Fail(Check(api_.cudaEventSynchronize(w.dead.get()), "cudaEventSynchronize"));
      Fail(Check(vmm_([&] { return api_.cuMemUnmap(w.addr, granularity_); }), "cuMemUnmap"));
    }
    SetAccessRuns(std::move(mapped));
    lock.lock();
    for (const auto& [g, w] : batch) {
      if (g != nullptr) {
        g->device = w.chunk >= 0 ? kUnmapped : kOnHost;
        ++g->completed;
      }
      if (w.chunk >= 0) Released(w.chunk, host_.stream);
    }
    host_.busy = false;
    cv_.notify_all();
  }
}

bool CopyResidency::Fail(Status st) {
  if (st.ok()) return false;
  std::lock_guard lock(failure_mu_);
  if (failure_.ok()) failure_ = std::move(st);
  return true;
}

Status CopyResidency::status() const {
  std::lock_guard lock(failure_mu_);
  return failure_;
}

Status CopyResidency::WaitOn(ResidencyTicket t, cudaStream_t stream) {
  // Waits even when the flag holds the value already: the device then knows when it was written (a thread that ran
  // ahead in real time may be behind the stream on a simulated clock, or the other way round).
  if (t.seq == 0) return Status::Ok();
  LastErrorScope errors(api_);
  const CUresult r = api_.cuStreamWaitValue32_v2(stream, reinterpret_cast<CUdeviceptr>(lanes_[t.lane].flag), t.seq,
                                                 CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) errors.Failed();
  return Check(r, "cuStreamWaitValue32");
}

Status CopyResidency::RecordDone(ResidencyTicket t, cudaEvent_t event) {
  const cudaStream_t bridge = lanes_[t.lane].bridge;
  Status st = WaitOn(t, bridge);
  LastErrorScope errors(api_);
  if (st.ok()) st = Check(api_.cudaEventRecord(event, bridge), "cudaEventRecord");
  if (!st.ok()) errors.Failed();
  return st;
}

template <typename Pred>
bool CopyResidency::Every(ResidencyRange r, Pred ok) const {
  std::lock_guard lock(mu_);
  for (uint64_t a = r.addr; a < r.addr + r.bytes; a += granularity_) {
    if (!ok(Find(a))) return false;
  }
  return true;
}

template <typename Pred>
uint64_t CopyResidency::Count(Pred ok) const {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (const auto& [addr, r] : reservations_) n += std::count_if(r.granules.begin(), r.granules.end(), ok);
  return n;
}

bool CopyResidency::Resident(ResidencyRange r) const {
  return Every(r, [](const Granule* g) {
    return g == nullptr || (g->device >= 0 && g->dead == nullptr && g->posted == g->completed);
  });
}

bool CopyResidency::Backed(ResidencyRange r) const {
  return Every(r, [](const Granule* g) { return g != nullptr && g->device >= 0 && g->posted == g->completed; });
}

bool CopyResidency::Done(ResidencyTicket t) const {
  if (t.seq == 0) return true;
  const uint32_t v = lanes_[t.lane].done.load(std::memory_order_acquire);
  return static_cast<int32_t>(v - t.seq) >= 0;
}

void CopyResidency::AwaitSettled(ResidencyRange r) {
  std::unique_lock lock(mu_);
  const auto settled = [&] {
    for (uint64_t a = r.addr / granularity_ * granularity_; a < r.addr + r.bytes && !stopping_; a += granularity_) {
      const Granule* g = Find(a);
      if (g != nullptr && g->posted != g->completed) return false;
    }
    return true;
  };
  while (!cv_.wait_for(lock, kStall, settled)) LogStall("a copy or memset waits for its operands' moves");
}

void CopyResidency::Finish() {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] {
      for (uint32_t l = 0; l < kLanes; ++l) {
        if (LaneBusy(l)) return false;
      }
      return host_.work.empty() && !host_.busy;
    });
  }
  // And on the device: the caller's thread then comes after every move (what it maps or copies next too).
  LastErrorScope errors(api_);
  for (LaneState& lane : lanes_) {
    if (lane.stream != nullptr && api_.cudaStreamSynchronize(lane.stream) != cudaSuccess) errors.Failed();
  }
}

uint64_t CopyResidency::device_bytes() const {
  std::lock_guard lock(mu_);
  return pool_.size() * granularity_;
}

uint64_t CopyResidency::live_bytes() const {
  return Count([](const Granule& g) { return g.device >= 0 && g.dead == nullptr; }) * granularity_;
}

uint64_t CopyResidency::peak_device_bytes() const {
  std::lock_guard lock(mu_);
  return peak_chunks_ * granularity_;
}

uint64_t CopyResidency::device_granules() const {
  return Count([](const Granule& g) { return g.device >= 0; });
}

}  // namespace karma::rt
