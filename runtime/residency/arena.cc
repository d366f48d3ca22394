// The managed-memory arena: range allocation, segment growth, stream-ordered reuse and stable placement.
#include "runtime/residency/arena.h"

#include <algorithm>

namespace karma::rt {
namespace {

// Placements kept per iteration; past this (no iteration boundary seen) they are not remembered.
constexpr size_t kMaxPlacements = 1u << 20;
// How far back the same-stream reuse looks among a stream's pending blocks.
constexpr size_t kPendingScan = 64;
// How many places a preference (SetPreference) is asked about per allocation before best fit decides.
constexpr size_t kPreferTries = 64;

// Same-stream reuse needs one stream per handle; the per-thread default stream is a different one per thread.
bool StreamOrdered(StreamKey s) { return s != kSyncStream && s != 0x2; }

}  // namespace

// ---- RangeAllocator ----

void RangeAllocator::Insert(uint64_t start, Range r) {
  by_start_.emplace(start, r);
  by_size_.emplace(r.size, start);
  free_bytes_ += r.size;
}

void RangeAllocator::Erase(std::map<uint64_t, Range>::iterator it) {
  by_size_.erase({it->second.size, it->first});
  free_bytes_ -= it->second.size;
  by_start_.erase(it);
}

void RangeAllocator::AddRange(uint64_t start, uint64_t size, uint32_t region) { Free(start, size, region); }

uint64_t RangeAllocator::FreeBytesIn(uint64_t lo, uint64_t hi) const {
  uint64_t bytes = 0;
  auto it = by_start_.upper_bound(lo);
  if (it != by_start_.begin()) --it;
  for (; it != by_start_.end() && it->first < hi; ++it) {
    const uint64_t a = std::max(lo, it->first), b = std::min(hi, it->first + it->second.size);
    if (b > a) bytes += b - a;
  }
  return bytes;
}

uint64_t RangeAllocator::Allocate(uint64_t size) {
  auto fit = by_size_.lower_bound({size, 0});
  if (fit == by_size_.end()) return 0;
  const uint64_t start = fit->second;
  auto it = by_start_.find(start);
  const Range r = it->second;
  Erase(it);
  if (r.size > size) Insert(start + size, {r.size - size, r.region});
  return start;
}

uint64_t RangeAllocator::AllocateWhere(uint64_t size, uint64_t step,
                                       const std::function<bool(uint64_t, uint64_t)>& prefer, size_t tries) {
  for (auto fit = by_size_.lower_bound({size, 0}); fit != by_size_.end() && tries > 0; ++fit) {
    const auto [len, start] = *fit;
    for (uint64_t at = start; at + size <= start + len && tries > 0; at += step, --tries) {
      if (prefer(at, size)) return AllocateAt(at, size) ? at : 0;
    }
  }
  return 0;
}

bool RangeAllocator::AllocateAt(uint64_t start, uint64_t size) {
  auto it = by_start_.upper_bound(start);
  if (it == by_start_.begin()) return false;
  --it;
  const uint64_t rs = it->first;
  const Range r = it->second;
  if (start + size > rs + r.size) return false;
  Erase(it);
  if (start > rs) Insert(rs, {start - rs, r.region});
  if (rs + r.size > start + size) Insert(start + size, {rs + r.size - start - size, r.region});
  return true;
}

void RangeAllocator::Free(uint64_t start, uint64_t size, uint32_t region) {
  auto next = by_start_.lower_bound(start);
  if (next != by_start_.end() && next->first == start + size && next->second.region == region) {
    size += next->second.size;
    Erase(next);
  }
  auto prev = by_start_.lower_bound(start);
  if (prev != by_start_.begin()) {
    --prev;
    if (prev->first + prev->second.size == start && prev->second.region == region) {
      start = prev->first;
      size += prev->second.size;
      Erase(prev);
    }
  }
  Insert(start, {size, region});
}

// ---- Arena ----

Arena::Arena(const CudaApi& api, Options options) : api_(api), options_(options), events_(api) {}

Arena::~Arena() {
  if (api_.cudaEventDestroy == nullptr) return;
  for (auto& [stream, q] : pending_) {
    for (Pending& p : q) api_.cudaEventDestroy(p.event);
  }
}

uint64_t Arena::SpanOf(uint64_t size) {
  return size <= kSmallLimit ? AlignUp(std::max<uint64_t>(size, 1), kSmallAlign) : AlignUp(size, kLargePage);
}

bool Arena::ContainsLocked(uint64_t addr) const {
  auto it = segments_.upper_bound(addr);
  if (it == segments_.begin()) return false;
  --it;
  return addr < it->first + it->second.size;
}

uint32_t Arena::RegionOfLocked(uint64_t addr) const {
  auto it = segments_.upper_bound(addr);
  return it == segments_.begin() ? 0 : std::prev(it)->second.region;
}

bool Arena::Contains(uint64_t addr) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ContainsLocked(addr);
}

bool Arena::GrowLocked(uint64_t span, bool keep_oom_error, AllocResult* failure) {
  if (source_) {
    const uint64_t request = std::max(AlignUp(options_.segment_bytes, kLargePage), AlignUp(span, kLargePage));
    const uint64_t start = source_(request);
    if (start == 0) {
      failure->status = AllocStatus::kOutOfMemory;
      failure->error = cudaErrorMemoryAllocation;
      return false;
    }
    return AddSegmentLocked(start, request);
  }
  if (api_.cudaMallocManaged == nullptr) {
    failure->status = AllocStatus::kUnavailable;
    failure->error = cudaErrorNotSupported;
    return false;
  }
  LastErrorScope errors(api_);
  // The slack page keeps room for `span` even when the segment does not start on a 2 MiB boundary.
  const uint64_t exact = span + kLargePage;
  uint64_t request = std::max(AlignUp(options_.segment_bytes, kLargePage), exact);
  void* p = nullptr;
  cudaError_t err = api_.cudaMallocManaged(&p, request, cudaMemAttachGlobal);
  if (err == cudaErrorMemoryAllocation && request > exact) {
    errors.Failed();
    request = exact;
    err = api_.cudaMallocManaged(&p, request, cudaMemAttachGlobal);
  }
  if (err != cudaSuccess || p == nullptr) {
    errors.Failed();
    failure->status = err == cudaErrorMemoryAllocation ? AllocStatus::kOutOfMemory : AllocStatus::kUnavailable;
    failure->error = err == cudaSuccess ? cudaErrorUnknown : err;
    if (failure->status == AllocStatus::kOutOfMemory && keep_oom_error) errors.Keep();
    return false;
  }
  const uint64_t raw = reinterpret_cast<uint64_t>(p);
  const uint64_t start = AlignUp(raw, kLargePage);
  return AddSegmentLocked(start, AlignDown(raw + request, kLargePage) - start);
}

bool Arena::AddSegmentLocked(uint64_t start, uint64_t size) {
  const auto region = static_cast<uint32_t>(segments_.size() + 1);
  segments_.emplace(start, Segment{size, region});
  large_.AddRange(start, size, region);
  usage_.reserved_bytes += size;
  usage_.segments++;
  return true;
}

uint64_t Arena::AllocateLargeLocked(uint64_t span, bool keep_oom_error, AllocResult* failure, bool prefer) {
  uint64_t addr = prefer && prefer_ != nullptr ? large_.AllocateWhere(span, kLargePage, prefer_, kPreferTries) : 0;
  if (addr == 0) addr = large_.Allocate(span);
  if (addr == 0 && GrowLocked(span, keep_oom_error, failure)) addr = large_.Allocate(span);
  return addr;
}

bool Arena::TakeAtLocked(uint64_t addr, uint64_t span, bool small, StreamKey stream, Block* out) {
  if ((small ? small_ : large_).AllocateAt(addr, span)) {
    out->span = span;
    out->small = small;
    out->region = RegionOfLocked(addr);
    return true;
  }
  if (!StreamOrdered(stream)) return false;
  auto q = pending_.find(stream);
  if (q == pending_.end()) return false;
  for (auto it = q->second.begin(); it != q->second.end(); ++it) {
    if (it->addr == addr && it->block.span == span && it->block.small == small) {
      *out = it->block;
      events_.Release(it->event);
      usage_.pending_bytes -= span;
      q->second.erase(it);
      return true;
    }
  }
  return false;
}

Arena::AllocResult Arena::Allocate(uint64_t size, StreamKey stream, bool keep_oom_error) {
  const uint64_t span = SpanOf(size);
  const bool small = size <= kSmallLimit;
  std::lock_guard<std::mutex> lock(mu_);
  PollLocked();
  AllocResult result;
  Block block;
  uint64_t addr = 0;
  const uint32_t ordinal = ordinal_++;
  if (prefer_ == nullptr && ordinal < hints_.size() && hints_[ordinal].span == span &&
      TakeAtLocked(hints_[ordinal].addr, span, small, stream, &block)) {
    addr = hints_[ordinal].addr;
    usage_.placement_hits++;
  }
  // A block this stream freed and has not reached yet: oldest first, so that with the same frees and allocations
  // every iteration each allocation gets the block the same allocation got last time (newest first would swap
  // equal-sized blocks every iteration). With a preference: the newest one it holds for, then a free range it
  // holds for, then the newest.
  std::deque<Pending>* queue = nullptr;
  auto reuse = [&](std::deque<Pending>::iterator it) {
    addr = it->addr;
    block = it->block;
    events_.Release(it->event);
    usage_.pending_bytes -= span;
    usage_.same_stream_reuses++;
    queue->erase(it);
  };
  std::deque<Pending>::iterator fallback;
  if (addr == 0 && StreamOrdered(stream)) {
    if (auto q = pending_.find(stream); q != pending_.end()) queue = &q->second;
  }
  if (queue != nullptr) {
    std::deque<Pending>& d = *queue;
    fallback = d.end();
    const size_t scan = std::min(d.size(), kPendingScan);
    for (size_t j = 0; j < scan && addr == 0; ++j) {
      auto it = d.begin() + static_cast<std::ptrdiff_t>(prefer_ != nullptr ? d.size() - 1 - j : j);
      if (it->block.span != span || it->block.small != small) continue;
      if (prefer_ == nullptr || prefer_(it->addr, span)) {
        reuse(it);
      } else if (fallback == d.end()) {
        fallback = it;
      }
    }
  }
  if (addr == 0 && prefer_ != nullptr) {
    addr = (small ? small_ : large_).AllocateWhere(span, kLargePage, prefer_, kPreferTries);
    if (addr != 0) block = Block{span, size, small, RegionOfLocked(addr)};
  }
  if (addr == 0 && queue != nullptr && fallback != queue->end()) reuse(fallback);
  if (addr == 0 && small) {
    addr = small_.Allocate(span);
    if (addr == 0) {
      const uint64_t slab = AllocateLargeLocked(kLargePage, keep_oom_error, &result);
      if (slab == 0) return result;
      small_.AddRange(slab, kLargePage, RegionOfLocked(slab));
      addr = small_.Allocate(span);
    }
    block = Block{span, size, true, RegionOfLocked(addr)};
  } else if (addr == 0) {
    addr = AllocateLargeLocked(span, keep_oom_error, &result, /*prefer=*/false);  // tried above
    if (addr == 0) return result;
    block = Block{span, size, false, RegionOfLocked(addr)};
  }
  block.requested = size;
  live_[addr] = block;
  if (placements_.size() < kMaxPlacements) {
    if (placements_.size() <= ordinal) placements_.resize(ordinal + 1);
    placements_[ordinal] = {addr, span};
  }
  usage_.live_bytes += span;
  usage_.requested_bytes += size;
  usage_.live_blocks++;
  usage_.peak_live_bytes = std::max(usage_.peak_live_bytes, usage_.live_bytes);
  result.addr = addr;
  return result;
}

void Arena::ReleaseLocked(uint64_t addr, const Block& b) {
  (b.small ? small_ : large_).Free(addr, b.span, b.region);
}

Arena::FreeStatus Arena::Free(uint64_t addr, StreamKey stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(addr);
  if (it == live_.end()) return ContainsLocked(addr) ? FreeStatus::kInvalid : FreeStatus::kNotArena;
  const Block block = it->second;
  live_.erase(it);
  usage_.live_bytes -= block.span;
  usage_.requested_bytes -= block.requested;
  usage_.live_blocks--;
  // Kernels queued before the free may still use the block; it waits for an event on the freeing stream.
  cudaEvent_t event = capturing_ ? nullptr : events_.Acquire();
  if (event == nullptr || api_.cudaEventRecord == nullptr) {
    usage_.leaked_bytes += block.span;
    return FreeStatus::kFreed;
  }
  LastErrorScope errors(api_);
  if (api_.cudaEventRecord(event, StreamOf(stream)) != cudaSuccess) {
    errors.Failed();
    events_.Release(event, false);
    usage_.leaked_bytes += block.span;
    return FreeStatus::kFreed;
  }
  const StreamKey key = stream == kSyncStream ? 0 : stream;
  pending_[key].push_back(Pending{addr, block, event});
  usage_.pending_bytes += block.span;
  return FreeStatus::kFreed;
}

uint64_t Arena::SolePage(uint64_t addr, uint64_t page_bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(addr);
  if (it == live_.end() || !it->second.small) return 0;
  const uint64_t page = AlignDown(addr, page_bytes);
  if (addr + it->second.span > page + page_bytes) return 0;
  return small_.FreeBytesIn(page, page + page_bytes) + it->second.span == page_bytes ? page : 0;
}

std::vector<std::pair<uint64_t, uint64_t>> Arena::SlabPagesFreedBy(uint64_t addr, StreamKey stream,
                                                                   uint64_t page_bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> pages;
  auto it = live_.find(addr);
  if (it == live_.end() || !it->second.small) return pages;
  const uint64_t end = addr + it->second.span;
  auto overlap = [](uint64_t a, uint64_t b, uint64_t lo, uint64_t hi) {
    return std::min(b, hi) > std::max(a, lo) ? std::min(b, hi) - std::max(a, lo) : 0;
  };
  const auto same = pending_.find(stream == kSyncStream ? 0 : stream);
  for (uint64_t page = AlignDown(addr, page_bytes); page < end; page += page_bytes) {
    const uint64_t hi = page + page_bytes;
    uint64_t dead = small_.FreeBytesIn(page, hi) + overlap(addr, end, page, hi);
    if (same != pending_.end()) {
      for (const Pending& q : same->second) {
        if (q.block.small) dead += overlap(q.addr, q.addr + q.block.span, page, hi);
      }
    }
    if (dead == page_bytes) pages.emplace_back(page, page_bytes);
  }
  return pages;
}

void Arena::PollLocked() {
  if (api_.cudaEventQuery == nullptr) return;
  for (auto& [stream, q] : pending_) {
    while (!q.empty()) {
      Pending& p = q.front();
      LastErrorScope errors(api_);
      const cudaError_t st = api_.cudaEventQuery(p.event);
      if (st == cudaErrorNotReady) break;
      // Any other answer means the stream will not run that work again (done, or a dead context).
      if (st != cudaSuccess) errors.Failed();
      ReleaseLocked(p.addr, p.block);
      usage_.pending_bytes -= p.block.span;
      events_.Release(p.event, st == cudaSuccess);
      q.pop_front();
    }
  }
}

void Arena::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  PollLocked();
}

void Arena::SetCapturing(bool capturing) {
  std::lock_guard<std::mutex> lock(mu_);
  capturing_ = capturing;
}

void Arena::BeginIteration() {
  std::lock_guard<std::mutex> lock(mu_);
  hints_ = std::move(placements_);
  placements_.clear();
  ordinal_ = 0;
}

ArenaUsage Arena::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return usage_;
}

}  // namespace karma::rt
