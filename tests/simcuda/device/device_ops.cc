// The device model's operations: kernels, copies, fills, managed-memory paging and moves, stream memory
// operations, and the virtual time each takes on its engine and on the calling thread.
#include <cuda.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "device/device.h"
#include "device/device_internal.h"

namespace simcuda {
namespace {

// Adds [addr, addr + bytes) to `ranges` unless a range with that start is there already.
void AddOnce(std::vector<Range>* ranges, Range r) {
  if (std::none_of(ranges->begin(), ranges->end(), [&](const Range& x) { return x.addr == r.addr; })) {
    ranges->push_back(r);
  }
}

}  // namespace

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
          stall += static_cast<double>(writebacks * kPageBytes) / hw.managed.d2h_bw;
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

  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
  std::vector<Range> touched;
  if (cost.num_ranges > 0) {
    for (size_t i = 0; i < std::min(cost.num_ranges, declared.size()); ++i) {
      touched.push_back({reinterpret_cast<uintptr_t>(declared[i].ptr), declared[i].bytes});
    }
  } else {
    // As a recorder would: every pointer-sized parameter that points into an allocation touches all of it (a
    // mapping of virtual memory likewise; one into a reserved range without a mapping, nothing that exists).
    for (size_t i = 0; i < fn->param_sizes.size(); ++i) {
      if (fn->param_sizes[i] != sizeof(void*)) continue;
      uintptr_t value;
      std::memcpy(&value, args[i], sizeof(value));
      if (const Allocation* a = Find(value)) {
        const bool host = a->kind == MemKind::kPinnedHost || a->kind == MemKind::kRegisteredHost;
        if (!host) AddOnce(&touched, {a->base, a->bytes});
      } else if (const Mapping* m = vmm_.FindMapping(value)) {
        AddOnce(&touched, {m->base, m->bytes});
      } else if (vmm_.Classify(value, 1).illegal) {
        AddOnce(&touched, {value, 1});
      }
    }
  }
  // Virtual memory: a reserved address without a mapping or access loses the context; host-backed mappings are
  // read and written over the host link (copy engines' rate), without migration.
  uint64_t host_bytes = 0;
  for (const Range& r : touched) {
    const VmmSpan v = vmm_.Classify(r.addr, r.bytes);
    if (v.illegal) {
      return Lose(cudaErrorIllegalAddress, fmt::format("kernel {} touches {:#x}, reserved without a mapping or "
                                                       "access", fn->name, r.addr));
    }
    host_bytes += v.host_bytes;
  }
  double bytes = cost.bytes;
  if (fn->cost == nullptr) {
    for (const Range& r : touched) bytes += static_cast<double>(r.bytes);
  }
  const double over_link = std::min(bytes, static_cast<double>(host_bytes));
  TouchResult faults;
  Touch(touched, &faults);
  const auto& hw = config_.profile;
  const double memory_s = (bytes - over_link) / hw.memory_bw + over_link / hw.copy.h2d_bw;
  const double seconds = hw.kernel_launch_s + std::max(cost.flops / hw.flops_per_s, memory_s) + faults.stall;
  const double start = compute_.Reserve(std::max(Ready(s), faults.ready), seconds);
  const double end = start + seconds;
  for (Page* p : faults.arrived) p->available_at = end;
  for (const Range& r : touched) vmm_.MarkBusy(r.addr, r.bytes, end);
  PlaceWritebacks(faults.writebacks, start);
  s->tail = end;
  ++stats_.kernels;
  Spend(hw.host.launch_s);
  Trace("kernel", fn->name, start, end);
  fn->body(&launch);
  return cudaSuccess;
}

cudaError_t Device::LaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return cudaErrorInvalidValue;
  {
    std::unique_lock<FairMutex> lock;
    CUstream_st* s = nullptr;
    SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
    s->tail = Ready(s);
    Spend(config_.profile.host.call_s);
  }
  // Everything before it in the stream has executed; it must not call CUDA, but it may take locks of its own.
  fn(user_data);
  return cudaSuccess;
}

bool Device::Classify(const void* p, size_t bytes, Side* side, const Allocation** alloc) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  const Allocation* a = Find(addr);
  *alloc = nullptr;
  if (a != nullptr) {
    const bool host = a->kind == MemKind::kPinnedHost || a->kind == MemKind::kRegisteredHost;
    if (addr + bytes > a->base + a->bytes) {
      if (!host) return false;
      *side = Side::kPageable;  // pinned memory and beyond: the driver stages the whole copy
      return true;
    }
    *alloc = a;
    *side = host ? Side::kPinned : Side::kDevice;
    return true;
  }
  const VmmSpan v = vmm_.Classify(addr, bytes);
  // A range reserved without a mapping (or access) at the call: the driver refuses the call (cudaErrorInvalidValue,
  // measured on an H200 with CUDA 13.0); the context stays usable.
  if (v.illegal) return false;
  if (v.Any()) {
    *side = v.device_bytes > 0 ? Side::kDevice : Side::kPinned;
    return true;
  }
  if (space_.Contains(addr)) return false;  // a freed device range is an error, not host memory
  *side = Side::kPageable;
  return true;
}

cudaError_t Device::Memcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                           bool blocking) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  // With unified addressing the direction follows from the pointers, whatever `kind` says.
  Side to, from;
  const Allocation *da = nullptr, *sa = nullptr;
  if (!Classify(dst, bytes, &to, &da) || !Classify(src, bytes, &from, &sa)) {
    return lost_ != cudaSuccess ? lost_ : cudaErrorInvalidValue;
  }
  std::vector<Range> managed;
  if (da != nullptr && da->kind == MemKind::kManaged) managed.push_back({reinterpret_cast<uintptr_t>(dst), bytes});
  if (sa != nullptr && sa->kind == MemKind::kManaged) managed.push_back({reinterpret_cast<uintptr_t>(src), bytes});
  TouchResult faults;
  Touch(managed, &faults);
  const auto& hw = config_.profile;
  const double b = static_cast<double>(bytes);
  Engine* engine = nullptr;
  double seconds = 0;
  const char* what = "copy";
  // A copy between device memory and pageable host memory goes through the driver's staging buffer: slower, and
  // the call returns only when it is done.
  bool pageable = false;
  if (to == Side::kDevice && from == Side::kDevice) {
    engine = &compute_;
    seconds = hw.kernel_launch_s + 2 * b / hw.memory_bw;
    what = "d2d";
  } else if (to == Side::kDevice) {
    engine = &h2d_;
    pageable = from == Side::kPageable;
    seconds = b / (pageable ? hw.pageable_bw : hw.copy.h2d_bw);
    stats_.h2d_bytes += bytes;
    what = pageable ? "h2d pageable" : "h2d";
  } else if (from == Side::kDevice) {
    engine = &d2h_;
    pageable = to == Side::kPageable;
    seconds = b / (pageable ? hw.pageable_bw : hw.copy.d2h_bw);
    stats_.d2h_bytes += bytes;
    what = pageable ? "d2h pageable" : "d2h";
  }
  if (pageable) stats_.pageable_bytes += bytes;
  seconds += faults.stall;
  const double ready = std::max(Ready(s), faults.ready);
  const double start = engine != nullptr ? engine->Reserve(ready, seconds) : ready;
  const double end = start + seconds;
  for (Page* p : faults.arrived) p->available_at = end;
  vmm_.MarkBusy(reinterpret_cast<uintptr_t>(dst), bytes, end);
  vmm_.MarkBusy(reinterpret_cast<uintptr_t>(src), bytes, end);
  PlaceWritebacks(faults.writebacks, start);
  s->tail = end;
  ++stats_.memcpys;
  Spend(hw.host.call_s);
  Trace(what, fmt::format("{} bytes", bytes), start, end);
  std::memmove(dst, src, bytes);
  if (blocking || pageable) AdvanceHost(end);
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
  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
  if (bytes == 0) return cudaSuccess;
  Side side;
  const Allocation* a = nullptr;
  if (!Classify(dst, bytes, &side, &a)) return lost_ != cudaSuccess ? lost_ : cudaErrorInvalidValue;
  if (side == Side::kPageable) return cudaErrorInvalidValue;
  TouchResult faults;
  if (a != nullptr && a->kind == MemKind::kManaged) {
    const Range r{reinterpret_cast<uintptr_t>(dst), bytes};
    Touch({&r, 1}, &faults);
  }
  const auto& hw = config_.profile;
  // Pinned host memory (a host-backed mapping, or zero-copy memory) is written over the host link.
  const double rate = side == Side::kPinned ? hw.copy.h2d_bw : hw.memory_bw;
  const double seconds = hw.kernel_launch_s + static_cast<double>(bytes) / rate + faults.stall;
  const double start = compute_.Reserve(std::max(Ready(s), faults.ready), seconds);
  const double end = start + seconds;
  for (Page* p : faults.arrived) p->available_at = end;
  vmm_.MarkBusy(reinterpret_cast<uintptr_t>(dst), bytes, end);
  PlaceWritebacks(faults.writebacks, start);
  s->tail = end;
  Spend(hw.host.call_s);
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

void Device::HoldFor(double end) {
  const double now = clocks_.Now();
  if (end <= now) return;
  stats_.managed_calls_blocked_s += end - now;
  AdvanceHost(end);
}

cudaError_t Device::PrefetchLocked(std::span<const Range> ranges, cudaMemLocation location, CUstream_st* s,
                                   double* end) {
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

  const auto& link = config_.profile.managed;
  const double ready = Ready(s);
  *end = ready;
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
    const double seconds = static_cast<double>(moved * kPageBytes) / link.h2d_bw;
    const double start = h2d_.Reserve(ready, seconds);
    *end = start + seconds;
    if (writebacks > 0) {
      const double wb_seconds = static_cast<double>(writebacks * kPageBytes) / link.d2h_bw;
      *end = std::max(*end, d2h_.Reserve(ready, wb_seconds) + wb_seconds);
    }
    for (Page* p : arrived) p->available_at = *end;
    stats_.prefetched_bytes += moved * kPageBytes;
    Trace("prefetch", fmt::format("{} pages in, {} evicted", moved, writebacks), start, *end);
  } else {
    for (Page* p : pages) {
      if (p->state != PageState::kDevice) continue;
      lru_.erase(p->lru);
      --resident_pages_;
      p->state = PageState::kHost;
      ++moved;
    }
    NoteUsage();
    const double seconds = static_cast<double>(moved * kPageBytes) / link.d2h_bw;
    const double start = d2h_.Reserve(ready, seconds);
    *end = start + seconds;
    stats_.prefetched_to_host_bytes += moved * kPageBytes;
    Trace("prefetch", fmt::format("{} pages out", moved), start, *end);
  }
  s->tail = *end;
  return cudaSuccess;
}

cudaError_t Device::Prefetch(std::span<const Range> ranges, cudaMemLocation location, cudaStream_t stream) {
  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
  double end = 0;
  SIMCUDA_RETURN_IF_ERROR(PrefetchLocked(ranges, location, s, &end));
  // Measured on an H100 (docs/gpu-results.md run 8): a prefetch of one range to the device returns before its
  // transfer; one to the host (an eviction) holds the thread until the transfer has ended.
  if (location.type == cudaMemLocationTypeDevice) {
    Spend(config_.profile.host.prefetch_call_s);
  } else {
    Spend(config_.profile.host.call_s);
    HoldFor(end);
  }
  return cudaSuccess;
}

cudaError_t Device::DiscardLocked(std::span<const Range> ranges, CUstream_st* s) {
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

cudaError_t Device::Discard(std::span<const Range> ranges, cudaStream_t stream) {
  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
  SIMCUDA_RETURN_IF_ERROR(DiscardLocked(ranges, s));
  Spend(config_.profile.host.call_s);
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
  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
  if (discard_first) SIMCUDA_RETURN_IF_ERROR(DiscardLocked(ranges, s));
  double end = 0;
  for (size_t i = 0; i < locations.size(); ++i) {
    const size_t from = location_starts[i];
    const size_t to = i + 1 < locations.size() ? location_starts[i + 1] : ranges.size();
    double part_end = 0;
    SIMCUDA_RETURN_IF_ERROR(PrefetchLocked(ranges.subspan(from, to - from), locations[i], s, &part_end));
    end = std::max(end, part_end);
  }
  // Measured on an H100 (docs/gpu-results.md run 7): the batched call returns when its transfers have ended.
  Spend(config_.profile.host.call_s);
  HoldFor(end);
  return cudaSuccess;
}

cudaError_t Device::DiscardBatch(std::span<const Range> ranges, cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || ranges.empty()) return cudaErrorInvalidValue;
  return Discard(ranges, stream);
}

cudaError_t Device::Advise(const void* ptr, size_t bytes, cudaMemoryAdvise advice, cudaMemLocation location) {
  if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy) return cudaErrorInvalidValue;
  std::lock_guard lock(mu_);
  SIMCUDA_RETURN_IF_LOST();
  Spend(config_.profile.host.call_s);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  const Allocation* a = Find(addr);
  if (a == nullptr || a->kind != MemKind::kManaged || addr + bytes > a->base + a->span) return cudaErrorInvalidValue;
  // Advice is accepted and has no effect on the model: paging follows accesses, prefetches and discards only.
  (void)location;
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------------------
// Stream memory operations

cudaError_t Device::CheckValueAddress(uintptr_t addr, bool wide) {
  if (addr % (wide ? 8 : 4) != 0) return cudaErrorInvalidValue;
  Side side;
  const Allocation* a = nullptr;
  if (!Classify(reinterpret_cast<const void*>(addr), wide ? 8 : 4, &side, &a)) {
    return lost_ != cudaSuccess ? lost_ : cudaErrorInvalidValue;
  }
  // Device memory only: the driver refused stream memory operations on pinned host memory on an H200 (CUDA 13.0,
  // 2026-11-28, tests/gpu/move_costs.cu), though the documentation allows them with its device pointer.
  return side == Side::kDevice ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t Device::WriteValue(cudaStream_t stream, uintptr_t addr, uint64_t value, bool wide) {
  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
  SIMCUDA_RETURN_IF_ERROR(CheckValueAddress(addr, wide));
  const double at = Ready(s);
  s->tail = at;
  vmm_.MarkBusy(addr, wide ? 8 : 4, at);
  if (wide) {
    __atomic_store_n(reinterpret_cast<uint64_t*>(addr), value, __ATOMIC_RELEASE);
  } else {
    __atomic_store_n(reinterpret_cast<uint32_t*>(addr), static_cast<uint32_t>(value), __ATOMIC_RELEASE);
  }
  written_at_[addr] = at;
  Spend(config_.profile.host.call_s);
  Trace("write", fmt::format("{:#x} = {}", addr, value), at, at);
  value_written_.notify_all();
  return cudaSuccess;
}

cudaError_t Device::WaitValue(cudaStream_t stream, uintptr_t addr, uint64_t value, bool wide, unsigned condition) {
  if ((condition & ~CU_STREAM_WAIT_VALUE_FLUSH) > CU_STREAM_WAIT_VALUE_NOR) return cudaErrorInvalidValue;
  std::unique_lock<FairMutex> lock;
  CUstream_st* s = nullptr;
  SIMCUDA_RETURN_IF_ERROR(Begin(stream, &lock, &s));
  SIMCUDA_RETURN_IF_ERROR(CheckValueAddress(addr, wide));
  Spend(config_.profile.host.call_s);
  const CUstream_st::ValueWait w{addr, value, wide, condition & ~CU_STREAM_WAIT_VALUE_FLUSH};
  if (Holds(w)) {  // already true: the stream goes on, no earlier than a stream write that made it so
    auto written = written_at_.find(addr);
    s->tail = std::max(Ready(s), written != written_at_.end() ? written->second : 0.0);
    return cudaSuccess;
  }
  s->tail = Ready(s);
  s->waiting = true;
  s->wait = w;
  ++waits_pending_;
  Trace("wait", fmt::format("{:#x}", addr), s->tail, s->tail);
  return cudaSuccess;
}

}  // namespace simcuda
