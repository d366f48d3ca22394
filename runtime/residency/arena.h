// The managed-memory arena that serves the application's device allocations without cudaMalloc/cudaFree.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ground/common/managed_pages.h"
#include "runtime/base/cuda_api.h"
#include "runtime/base/event_pool.h"
#include "runtime/base/streams.h"

namespace karma::rt {

inline constexpr uint64_t kLargePage = 2ull << 20;   // large buffers: 2 MiB spans, 2 MiB aligned
inline constexpr uint64_t kSmallLimit = 1ull << 20;  // up to this size, buffers are packed into 2 MiB slabs
inline constexpr uint64_t kSmallAlign = 256;          // what cudaMalloc guarantees

// Free address ranges: best fit (smallest range that fits, lowest address among equals); a freed range merges
// with its neighbours of the same region only, so no block ever spans two separately allocated segments.
class RangeAllocator {
 public:
  void AddRange(uint64_t start, uint64_t size, uint32_t region);
  // The start of a range of `size` bytes, or 0 when none is free.
  uint64_t Allocate(uint64_t size);
  // Takes exactly [start, start + size) when all of it is free.
  bool AllocateAt(uint64_t start, uint64_t size);
  // The start of a range of `size` bytes where `prefer(start, size)` holds, trying at most `tries` places: free
  // ranges best fit first, `step` apart inside each. 0 when none was found (nothing is taken).
  uint64_t AllocateWhere(uint64_t size, uint64_t step, const std::function<bool(uint64_t, uint64_t)>& prefer,
                         size_t tries);
  void Free(uint64_t start, uint64_t size, uint32_t region);
  uint64_t free_bytes() const { return free_bytes_; }
  size_t range_count() const { return by_start_.size(); }
  // The free bytes inside [lo, hi).
  uint64_t FreeBytesIn(uint64_t lo, uint64_t hi) const;

 private:
  struct Range {
    uint64_t size;
    uint32_t region;
  };
  void Insert(uint64_t start, Range r);
  void Erase(std::map<uint64_t, Range>::iterator it);
  std::map<uint64_t, Range> by_start_;
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (size, start)
  uint64_t free_bytes_ = 0;
};

struct ArenaUsage {
  uint64_t reserved_bytes = 0;   // usable bytes of all segments
  uint64_t live_bytes = 0;       // spans of the blocks the application holds
  uint64_t requested_bytes = 0;  // what the application asked for, of those blocks
  uint64_t peak_live_bytes = 0;
  uint64_t pending_bytes = 0;    // freed on a stream that has not reached the free yet
  uint64_t leaked_bytes = 0;     // freed where reuse could not be made safe (graph capture, no events)
  uint64_t live_blocks = 0;
  uint64_t segments = 0;
  uint64_t placement_hits = 0;   // allocations placed where the same allocation of the last iteration was
  uint64_t same_stream_reuses = 0;
};

// Serves device allocations from cudaMallocManaged segments. Small buffers are packed (256-byte aligned) into
// 2 MiB slabs, larger ones get 2 MiB-aligned spans of their own so that prefetch and eviction never split a
// residency page between buffers. Frees are stream-ordered: a block freed on stream S is reusable by S at once and by everyone else
// when an event recorded on S completes; cudaFree's blocks wait for the legacy stream. Segments are never
// returned (cudaFree synchronizes the device). Thread-safe.
class Arena {
 public:
  struct Options {
    uint64_t segment_bytes = 256ull << 20;
  };
  // Where segments come from instead of cudaMallocManaged (the copy residency's reservations): the address of
  // `bytes` (a multiple of 2 MiB), or 0 when there is none.
  using SegmentSource = std::function<uint64_t(uint64_t bytes)>;
  enum class AllocStatus { kOk, kOutOfMemory, kUnavailable };
  struct AllocResult {
    AllocStatus status = AllocStatus::kOk;
    uint64_t addr = 0;
    cudaError_t error = cudaSuccess;  // the error of the failed segment allocation
  };
  enum class FreeStatus { kFreed, kNotArena, kInvalid };

  Arena(const CudaApi& api, Options options);
  // Before the first allocation.
  void SetSegmentSource(SegmentSource source) { source_ = std::move(source); }
  // Where blocks go first: the copy path's addresses whose pages have device memory, so that no remap comes
  // between an allocation and its first use. With a preference, a stream reuses the block it freed last rather
  // than the one this allocation got last time (no placement by history): a block freed recently still has its
  // device memory, an older one may have given it away.
  using Preference = std::function<bool(uint64_t addr, uint64_t bytes)>;
  void SetPreference(Preference prefer) { prefer_ = std::move(prefer); }
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // `stream` is kSyncStream for cudaMalloc. kUnavailable: managed memory cannot be had for a reason other than
  // its size (the caller passes the request through). The runtime's last error is left as it was, except that
  // with `keep_oom_error` an out-of-memory failure leaves cudaErrorMemoryAllocation there, as cudaMalloc would.
  AllocResult Allocate(uint64_t size, StreamKey stream, bool keep_oom_error = true);
  // kNotArena: outside every segment (someone else's pointer). kInvalid: inside a segment but not the start of a
  // live block (a double free): the caller reports cudaErrorInvalidValue as the real runtime would.
  FreeStatus Free(uint64_t addr, StreamKey stream);
  // While a stream capture is active, frees cannot record events: their blocks are never reused.
  void SetCapturing(bool capturing);
  // True when addr lies inside a segment.
  bool Contains(uint64_t addr) const;
  // Before Free(addr, stream) of a small block: the residency pages it lies on that hold no other block then but
  // free ones and those freed earlier on the same stream (whose work precedes this free). Their contents are dead
  // once the stream reaches the free, so they may leave the device without a write-back. Empty for a large block
  // (its pages are its own) or an address that is not a live block.
  // The start of the `page_bytes` page a small block lies in when no other block is live there (a slab it has to
  // itself: its pages may get device memory without a copy); 0 otherwise.
  uint64_t SolePage(uint64_t addr, uint64_t page_bytes) const;
  // Pages of `page_bytes` (the managed residency page, or the copy path's 2 MiB chunk).
  std::vector<std::pair<uint64_t, uint64_t>> SlabPagesFreedBy(uint64_t addr, StreamKey stream,
                                                              uint64_t page_bytes = kResidencyPage) const;
  // The allocation ordinals restart; this iteration's placements become the next one's hints.
  void BeginIteration();
  // Moves blocks whose stream reached their free back to the free lists.
  void Poll();
  ArenaUsage usage() const;
  // The bytes an allocation of `size` takes in the arena (what usage().live_bytes counts).
  static uint64_t SpanOf(uint64_t size);

 private:
  struct Block {
    uint64_t span = 0;
    uint64_t requested = 0;
    bool small = false;
    uint32_t region = 0;
  };
  struct Pending {
    uint64_t addr = 0;
    Block block;
    cudaEvent_t event = nullptr;
  };
  struct Placement {
    uint64_t addr = 0;
    uint64_t span = 0;
  };
  struct Segment {
    uint64_t size = 0;
    uint32_t region = 0;
  };
  // `prefer`: try the preference's places first.
  uint64_t AllocateLargeLocked(uint64_t span, bool keep_oom_error, AllocResult* failure, bool prefer = true);
  bool GrowLocked(uint64_t span, bool keep_oom_error, AllocResult* failure);
  bool AddSegmentLocked(uint64_t start, uint64_t size);
  bool TakeAtLocked(uint64_t addr, uint64_t span, bool small, StreamKey stream, Block* out);
  void ReleaseLocked(uint64_t addr, const Block& b);
  void PollLocked();
  uint32_t RegionOfLocked(uint64_t addr) const;
  bool ContainsLocked(uint64_t addr) const;

  const CudaApi& api_;
  const Options options_;
  SegmentSource source_;
  Preference prefer_;
  mutable std::mutex mu_;
  RangeAllocator large_;
  RangeAllocator small_;
  std::map<uint64_t, Segment> segments_;  // by start
  std::unordered_map<uint64_t, Block> live_;
  std::map<StreamKey, std::deque<Pending>> pending_;
  EventPool events_;
  std::vector<Placement> hints_;
  std::vector<Placement> placements_;
  uint32_t ordinal_ = 0;
  bool capturing_ = false;
  ArenaUsage usage_;
};

}  // namespace karma::rt
