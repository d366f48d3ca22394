// The managed residency: managed-memory calls on the calling thread or the mover threads, and what they cost their
// threads.
#include "runtime/residency/managed_residency.h"

#include <chrono>
#include <iterator>

#include "ground/common/log.h"
#include "ground/common/managed_pages.h"
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
class ManagedResidency::HeldFor {
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

ManagedResidency::Batch::Batch(std::span<const ResidencyRange> ranges) {
  for (const ResidencyRange& r : ranges) {
    ptrs.push_back(reinterpret_cast<void*>(r.addr));
    sizes.push_back(r.bytes);
  }
}

void ManagedResidency::SetThreads(bool on) {
  if (on && mover_ == nullptr) mover_ = std::make_unique<Mover>();
  if (!on && mover_ != nullptr) {
    mover_->Drain();
    mover_.reset();
    recorded_by_.clear();
  }
}

void ManagedResidency::AbandonAfterFork() {
  if (mover_ != nullptr) mover_->AbandonAfterFork();
}

void ManagedResidency::PrefetchRanges(const CudaApi& api, std::span<const ResidencyRange> ranges, cudaStream_t s,
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
  for (const ResidencyRange& r : ranges) {
    if (api.cudaMemPrefetchAsync(reinterpret_cast<const void*>(r.addr), r.bytes, loc, 0, s) != cudaSuccess) {
      errors.Failed();
    }
  }
}

ResidencyTicket ManagedResidency::Move(std::span<const ResidencyRange> ranges, std::span<const cudaEvent_t> after,
                                       const MoveEvents& events, bool to_device) {
  if (ranges.empty() || !EnsureStreams()) return {};
  const Lane lane = to_device ? kIn : kOut;
  const cudaStream_t s = to_device ? in_ : out_;
  live::Counter& held_ns = mover_ != nullptr ? stats_->mover_move_ns : stats_->app_move_ns;
  CallKindStats& kind = calls_[to_device ? kPrefetchCall : kEvictCall];
  std::vector<cudaEvent_t> waits(after.begin(), after.end());
  const cudaEvent_t done = events.done, started = events.started;
  auto issue = [&api = api_, &held_ns, &kind, s, waits, list = std::vector<ResidencyRange>(ranges.begin(), ranges.end()),
                loc = Location(to_device, device_), batch = batch_, done, started] {
    HeldFor held(held_ns, kind);
    LastErrorScope errors(api);
    for (cudaEvent_t w : waits) {
      if (w != nullptr && api.cudaStreamWaitEvent(s, w, 0) != cudaSuccess) errors.Failed();
    }
    if (started != nullptr && api.cudaEventRecord(started, s) != cudaSuccess) errors.Failed();
    PrefetchRanges(api, list, s, loc, batch);
    if (done != nullptr && api.cudaEventRecord(done, s) != cudaSuccess) errors.Failed();
  };
  const ResidencyTicket t{lane, ++posted_[lane]};
  if (done != nullptr) done_[(uint64_t{lane} << 32) | t.seq] = done;
  if (mover_ == nullptr) {
    issue();
    return t;
  }
  // The lane's jobs and the jobs recording the events this one waits for run first.
  std::vector<Mover::Ticket> before;
  for (cudaEvent_t w : waits) {
    auto it = recorded_by_.find(w);
    if (it != recorded_by_.end()) before.push_back(it->second);
  }
  const Mover::Ticket job = mover_->Post(to_device ? 0 : 1, std::move(before), std::move(issue));
  if (done != nullptr) recorded_by_[done] = job;
  return t;
}

ResidencyTicket ManagedResidency::Evict(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                                        const MoveEvents& events) {
  return Move(r, after, events, false);
}

ResidencyTicket ManagedResidency::Fetch(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                                        const MoveEvents& events) {
  return Move(r, after, events, true);
}

ResidencyTicket ManagedResidency::Drop(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                                       bool /*held*/, std::optional<cudaStream_t> user) {
  if (r.empty() || api_.cudaMemDiscardBatchAsync == nullptr || !EnsureStreams()) return {};
  LastErrorScope errors(api_);
  for (cudaEvent_t e : after) {
    if (e != nullptr && api_.cudaStreamWaitEvent(aux_, e, 0) != cudaSuccess) errors.Failed();
  }
  // Nothing `user` is given later may run before the discard has happened.
  if (Discard(r, aux_) && user.has_value() && !Order(aux_, *user)) errors.Failed();
  return {};
}

ResidencyTicket ManagedResidency::Make(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                                       std::optional<cudaStream_t> user) {
  if (r.empty()) return {};
  const cudaStream_t s = user.value_or(nullptr);
  LastErrorScope errors(api_);
  for (cudaEvent_t e : after) {
    if (e != nullptr && api_.cudaStreamWaitEvent(s, e, 0) != cudaSuccess) errors.Failed();
  }
  if (!DiscardAndPrefetch(r, s)) {
    HeldFor held(stats_->app_move_ns, calls_[kPrefetchCall]);
    PrefetchRanges(api_, r, s, Location(true, device_), batch_);
  }
  return {};
}

void ManagedResidency::Recorded(cudaEvent_t e) {
  if (mover_ == nullptr || e == nullptr) return;
  auto it = recorded_by_.find(e);
  if (it == recorded_by_.end()) return;
  HeldFor held(stats_->app_move_ns, calls_[kMoverWait]);
  mover_->Wait(it->second);
  recorded_by_.erase(it);
}

bool ManagedResidency::Discard(std::span<const ResidencyRange> ranges, cudaStream_t s) {
  HeldFor held(stats_->app_move_ns, calls_[kDiscardCall]);
  LastErrorScope errors(api_);
  Batch b(ranges);
  if (api_.cudaMemDiscardBatchAsync(b.ptrs.data(), b.sizes.data(), b.ptrs.size(), 0, s) != cudaSuccess) {
    errors.Failed();
    return false;
  }
  return true;
}

bool ManagedResidency::DiscardAndPrefetch(std::span<const ResidencyRange> ranges, cudaStream_t s) {
  // The batch call refuses the legacy default stream.
  if (api_.cudaMemDiscardAndPrefetchBatchAsync == nullptr || s == nullptr || s == cudaStreamLegacy) return false;
  HeldFor held(stats_->app_move_ns, calls_[kDiscardAndPrefetchCall]);
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

void ManagedResidency::PopulateAllocation(uint64_t addr, uint64_t size, cudaStream_t stream) {
  HeldFor held(stats_->app_move_ns, calls_[kAllocationCall]);
  LastErrorScope errors(api_);
  if (api_.cudaMemPrefetchAsync(reinterpret_cast<const void*>(addr), size, Location(true, device_), 0, stream) !=
      cudaSuccess) {
    errors.Failed();
  }
}

void ManagedResidency::StartIteration() {
  done_.clear();  // the events are recycled from now on
  if (mover_ == nullptr) return;
  for (const Mover::Ticket& t : posted_before_) mover_->Wait(t);
  for (auto it = recorded_by_.begin(); it != recorded_by_.end();) {
    it = mover_->Ran(it->second) ? recorded_by_.erase(it) : std::next(it);
  }
  posted_before_ = mover_->Last();
}

bool ManagedResidency::Issued() const {
  if (mover_ == nullptr) return true;
  for (const Mover::Ticket& t : mover_->Last()) {
    if (!mover_->Ran(t)) return false;
  }
  return true;
}

void ManagedResidency::Finish() {
  if (mover_ == nullptr) return;
  mover_->Drain();
  recorded_by_.clear();
}

ManagedResidency::~ManagedResidency() = default;  // streams and events belong to the context, released with it

uint64_t ManagedResidency::granularity() const { return kResidencyPage; }

Result<uint64_t> ManagedResidency::Reserve(uint64_t bytes, bool /*on_device*/) {
  void* p = nullptr;
  LastErrorScope errors(api_);
  if (api_.cudaMallocManaged == nullptr || api_.cudaMallocManaged(&p, bytes, cudaMemAttachGlobal) != cudaSuccess) {
    errors.Failed();
    return Internal(fmt::format("cudaMallocManaged of {} bytes failed", bytes));
  }
  return reinterpret_cast<uint64_t>(p);
}

void ManagedResidency::Release(uint64_t addr) {
  if (api_.cudaFree != nullptr) api_.cudaFree(reinterpret_cast<void*>(addr));
}

bool ManagedResidency::EnsureStreams() {
  if (in_ != nullptr) return true;
  if (streams_failed_ || api_.cudaStreamCreateWithFlags == nullptr) return false;
  LastErrorScope errors(api_);
  // Non-blocking: the legacy default stream must not wait for KARMA's copies, only where the plan says.
  if (api_.cudaStreamCreateWithFlags(&in_, cudaStreamNonBlocking) != cudaSuccess ||
      api_.cudaStreamCreateWithFlags(&out_, cudaStreamNonBlocking) != cudaSuccess ||
      api_.cudaStreamCreateWithFlags(&aux_, cudaStreamNonBlocking) != cudaSuccess) {
    errors.Failed();
    streams_failed_ = true;
    in_ = out_ = aux_ = nullptr;
    KARMA_LOG(kWarn, "replay disabled, running as um: KARMA's streams could not be created");
    return false;
  }
  return true;
}

bool ManagedResidency::Order(cudaStream_t first, cudaStream_t then) {
  if (order_ == nullptr && api_.cudaEventCreateWithFlags(&order_, cudaEventDisableTiming) != cudaSuccess) {
    order_ = nullptr;
    return false;
  }
  return api_.cudaEventRecord(order_, first) == cudaSuccess && api_.cudaStreamWaitEvent(then, order_, 0) == cudaSuccess;
}

cudaEvent_t ManagedResidency::DoneEvent(ResidencyTicket t) const {
  auto it = done_.find((uint64_t{t.lane} << 32) | t.seq);
  return it != done_.end() ? it->second : nullptr;
}

Status ManagedResidency::WaitOn(ResidencyTicket t, cudaStream_t stream) {
  if (t.seq == 0) return Status::Ok();
  cudaEvent_t e = DoneEvent(t);
  if (e == nullptr) return Unsupported("a managed move is waited for through the `done` event it was given");
  Recorded(e);
  return api_.cudaStreamWaitEvent(stream, e, 0) == cudaSuccess ? Status::Ok() : Internal("cudaStreamWaitEvent failed");
}

Status ManagedResidency::RecordDone(ResidencyTicket t, cudaEvent_t event) {
  if (!EnsureStreams()) return Internal("no streams");
  if (Status st = WaitOn(t, aux_); !st.ok()) return st;
  return api_.cudaEventRecord(event, aux_) == cudaSuccess ? Status::Ok() : Internal("cudaEventRecord failed");
}

bool ManagedResidency::Done(ResidencyTicket t) const {
  if (t.seq == 0) return true;
  cudaEvent_t e = DoneEvent(t);
  if (e == nullptr) return false;
  auto it = recorded_by_.find(e);
  if (it != recorded_by_.end() && !mover_->Ran(it->second)) return false;
  return api_.cudaEventQuery(e) == cudaSuccess;
}

std::string ManagedResidency::CallsLine(uint64_t replayed) const {
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
