// The replay's managed-memory calls, on the calling thread or the mover threads, and what they cost their threads.
#include "runtime/replay/managed_moves.h"

#include <chrono>
#include <iterator>

#include "ground/common/log.h"
#include "ground/common/wall_time.h"

namespace karma::rt {
namespace {

cudaMemLocation Location(bool device, int id) {
  cudaMemLocation l{};
  l.type = device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
  l.id = device ? id : 0;
  return l;
}

constexpr const char* kCallKindNames[] = {"prefetch", "evict", "discard", "discard+prefetch", "populate at allocation",
                                          "wait for the move threads"};

}  // namespace

// Adds the wall time of its scope to the thread's total and to the kind of call: how long KARMA's managed-memory
// calls hold a thread (on an H100 a batched move held its caller for the transfer).
class ManagedMoves::HeldFor {
 public:
  HeldFor(live::Counter& total, CallKindStats& kind)
      : total_(total), kind_(kind), start_(std::chrono::steady_clock::now()) {}
  ~HeldFor() {
    const uint64_t ns = NsSince(start_);
    total_.fetch_add(ns, std::memory_order_relaxed);
    kind_.ns.fetch_add(ns, std::memory_order_relaxed);
    kind_.calls.fetch_add(1, std::memory_order_relaxed);
  }
  HeldFor(const HeldFor&) = delete;
  HeldFor& operator=(const HeldFor&) = delete;

 private:
  live::Counter& total_;
  CallKindStats& kind_;
  std::chrono::steady_clock::time_point start_;
};

ManagedMoves::Batch::Batch(const std::vector<AddressRange>& ranges) {
  for (const AddressRange& r : ranges) {
    ptrs.push_back(reinterpret_cast<void*>(r.addr));
    sizes.push_back(r.bytes);
  }
}

void ManagedMoves::SetThreads(bool on) {
  if (on && mover_ == nullptr) mover_ = std::make_unique<Mover>();
  if (!on && mover_ != nullptr) {
    mover_->Drain();
    mover_.reset();
    recorded_by_.clear();
  }
}

void ManagedMoves::AbandonAfterFork() {
  if (mover_ != nullptr) mover_->AbandonAfterFork();
}

void ManagedMoves::PrefetchRanges(const CudaApi& api, const std::vector<AddressRange>& ranges, cudaStream_t s,
                                  cudaMemLocation loc, bool batch) {
  if (ranges.empty()) return;
  LastErrorScope errors(api);
  // The batch call refuses the legacy default stream.
  if (batch && ranges.size() > 1 && api.cudaMemPrefetchBatchAsync != nullptr && s != nullptr &&
      s != cudaStreamLegacy) {
    Batch b(ranges);
    size_t first = 0;
    if (api.cudaMemPrefetchBatchAsync(b.ptrs.data(), b.sizes.data(), b.ptrs.size(), &loc, &first, 1, 0, s) ==
        cudaSuccess) {
      return;
    }
    errors.Failed();
  }
  if (api.cudaMemPrefetchAsync == nullptr) return;
  for (const AddressRange& r : ranges) {
    if (api.cudaMemPrefetchAsync(reinterpret_cast<const void*>(r.addr), r.bytes, loc, 0, s) != cudaSuccess) {
      errors.Failed();
    }
  }
}

void ManagedMoves::Prefetch(live::Stats& stats, const std::vector<AddressRange>& ranges, cudaStream_t s,
                            bool to_device) {
  HeldFor held(stats.app_move_ns, calls_[to_device ? kPrefetchCall : kEvictCall]);
  PrefetchRanges(api_, ranges, s, Location(to_device, device_), batch_);
}

void ManagedMoves::Move(live::Stats& stats, int lane, cudaStream_t s, const std::vector<cudaEvent_t>& waits,
                        std::vector<AddressRange> ranges, bool to_device, cudaEvent_t done, cudaEvent_t started) {
  live::Counter& held_ns = mover_ != nullptr ? stats.mover_move_ns : stats.app_move_ns;
  CallKindStats& kind = calls_[to_device ? kPrefetchCall : kEvictCall];
  auto issue = [&api = api_, &held_ns, &kind, s, waits, ranges = std::move(ranges),
                loc = Location(to_device, device_), batch = batch_, done, started] {
    HeldFor held(held_ns, kind);
    LastErrorScope errors(api);
    for (cudaEvent_t w : waits) {
      if (w != nullptr && api.cudaStreamWaitEvent(s, w, 0) != cudaSuccess) errors.Failed();
    }
    if (started != nullptr && api.cudaEventRecord(started, s) != cudaSuccess) errors.Failed();
    PrefetchRanges(api, ranges, s, loc, batch);
    if (done != nullptr && api.cudaEventRecord(done, s) != cudaSuccess) errors.Failed();
  };
  if (mover_ == nullptr) {
    issue();
    return;
  }
  // The lane's jobs and the jobs recording the events this one waits for run first.
  std::vector<Mover::Ticket> after;
  for (cudaEvent_t w : waits) {
    auto it = recorded_by_.find(w);
    if (it != recorded_by_.end()) after.push_back(it->second);
  }
  const Mover::Ticket t = mover_->Post(lane, std::move(after), std::move(issue));
  if (done != nullptr) recorded_by_[done] = t;
}

void ManagedMoves::Ready(live::Stats& stats, cudaEvent_t e) {
  if (mover_ == nullptr || e == nullptr) return;
  auto it = recorded_by_.find(e);
  if (it == recorded_by_.end()) return;
  HeldFor held(stats.app_move_ns, calls_[kMoverWait]);
  mover_->Wait(it->second);
  recorded_by_.erase(it);
}

bool ManagedMoves::Discard(live::Stats& stats, const std::vector<AddressRange>& ranges, cudaStream_t s) {
  if (api_.cudaMemDiscardBatchAsync == nullptr) return false;
  HeldFor held(stats.app_move_ns, calls_[kDiscardCall]);
  LastErrorScope errors(api_);
  Batch b(ranges);
  if (api_.cudaMemDiscardBatchAsync(b.ptrs.data(), b.sizes.data(), b.ptrs.size(), 0, s) != cudaSuccess) {
    errors.Failed();
    return false;
  }
  return true;
}

bool ManagedMoves::DiscardAndPrefetch(live::Stats& stats, const std::vector<AddressRange>& ranges, cudaStream_t s) {
  // The batch call refuses the legacy default stream.
  if (api_.cudaMemDiscardAndPrefetchBatchAsync == nullptr || s == nullptr || s == cudaStreamLegacy) return false;
  HeldFor held(stats.app_move_ns, calls_[kDiscardAndPrefetchCall]);
  LastErrorScope errors(api_);
  Batch b(ranges);
  cudaMemLocation loc = Location(true, device_);
  size_t first = 0;
  if (api_.cudaMemDiscardAndPrefetchBatchAsync(b.ptrs.data(), b.sizes.data(), b.ptrs.size(), &loc, &first, 1, 0, s) !=
      cudaSuccess) {
    errors.Failed();
    return false;
  }
  return true;
}

void ManagedMoves::PopulateAllocation(live::Stats& stats, uint64_t addr, uint64_t size, StreamKey stream) {
  HeldFor held(stats.app_move_ns, calls_[kAllocationCall]);
  LastErrorScope errors(api_);
  const StreamKey key = stream == kSyncStream ? 0 : stream;
  if (api_.cudaMemPrefetchAsync(reinterpret_cast<const void*>(addr), size, Location(true, device_), 0,
                                StreamOf(key)) != cudaSuccess) {
    errors.Failed();
  }
}

void ManagedMoves::StartIteration() {
  if (mover_ == nullptr) return;
  for (const Mover::Ticket& t : posted_before_) mover_->Wait(t);
  for (auto it = recorded_by_.begin(); it != recorded_by_.end();) {
    it = mover_->Ran(it->second) ? recorded_by_.erase(it) : std::next(it);
  }
  posted_before_ = mover_->Last();
}

void ManagedMoves::Drain() {
  if (mover_ == nullptr) return;
  mover_->Drain();
  recorded_by_.clear();
}

std::string ManagedMoves::CallsLine(uint64_t replayed) const {
  static_assert(std::size(kCallKindNames) == kCallKinds, "a name for each kind of call");
  if (replayed == 0) return {};
  std::string line;
  for (int k = 0; k < kCallKinds; ++k) {
    const uint64_t calls = calls_[k].calls.load(std::memory_order_relaxed);
    if (calls == 0) continue;
    line += fmt::format("{}{} {:.1f} ({:.2f} ms)", line.empty() ? "" : ", ", kCallKindNames[k],
                        static_cast<double>(calls) / static_cast<double>(replayed),
                        static_cast<double>(calls_[k].ns.load(std::memory_order_relaxed)) / 1e6 /
                            static_cast<double>(replayed));
  }
  return line.empty() ? line : "managed-memory calls per replayed iteration, wall clock: " + line;
}

}  // namespace karma::rt
