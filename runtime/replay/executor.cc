// The replay executor: positions, issue of plan actions on KARMA's streams, recompute with validation, divergence.
#include "runtime/replay/executor.h"

#include <algorithm>

#include "ground/common/log.h"
#include "runtime/residency/arena.h"

namespace karma::rt {
namespace {

constexpr uint32_t kDivergentIterationsBeforeRerecord = 3;
constexpr uint32_t kMaxRerecords = 3;

template <typename T>
bool Has(const std::vector<T>& v, T x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Waits for everything on `s`; false when that failed.
bool Sync(const CudaApi& api, cudaStream_t s, LastErrorScope& errors) {
  if (api.cudaStreamSynchronize(s) == cudaSuccess) return true;
  errors.Failed();
  return false;
}

}  // namespace

Executor::Executor(const CudaApi& api, live::Stats* stats)
    : api_(api), stats_(stats), meter_(api), managed_(std::make_unique<ManagedResidency>(api, stats)),
      residency_(managed_.get()) {}

Executor::~Executor() = default;  // streams and events belong to the process's CUDA context, released with it

void Executor::SetResidency(::karma::rt::Residency* residency) {
  owned_ = residency != nullptr;
  residency_ = owned_ ? residency : managed_.get();
  page_ = residency_->granularity();
  if (owned_) SetMoveThreads(false);
}

void Executor::SetStats(live::Stats* stats) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = stats;
  managed_->SetStats(stats);
}

void Executor::SetBatchMoves(bool on) { managed_->SetBatch(on); }

void Executor::SetMoveThreads(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  managed_->SetThreads(on);
}

void Executor::AbandonAfterFork() {
  // Not under mu_: a thread of the parent may have held it at the fork.
  managed_->AbandonAfterFork();
}

std::string Executor::program_summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& p = prog_ != nullptr ? prog_ : pending_;
  return p != nullptr ? p->summary : std::string();
}

std::string Executor::CallsLine() const {
  return managed_->CallsLine(stats_->replayed_iterations.load(std::memory_order_relaxed));
}

uint64_t Executor::diverged_period() const {
  std::lock_guard<std::mutex> lock(mu_);
  return divergence_.period;
}

std::vector<bool> Executor::rejected_ops() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recomputes_.rejected_ops();
}

void Executor::Install(std::shared_ptr<const ReplayProgram> program, uint64_t base, int device, uint64_t next_op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (program == nullptr || program->period == 0) return;
  // Allocations are matched by their order within an iteration. Installed right at an iteration's start, a first
  // program missed the allocations the application made before that iteration's first launch.
  if (prog_ == nullptr && next_op != UINT64_MAX && next_op >= base && (next_op - base) % program->period == 0) {
    allocations_.Distrust(IterationIndex(next_op, base, program->period));
  }
  pending_ = std::move(program);
  // UINT64_MAX: from the next marker on (OnMarker sets the base); a running program goes on until then.
  if (base != UINT64_MAX || prog_ == nullptr) base_ = base;
  managed_->SetDevice(device);
  stats_->measures_stalls.store(1, std::memory_order_relaxed);
  armed_.store(true, std::memory_order_relaxed);
}

void Executor::Uninstall() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_.store(false, std::memory_order_relaxed);
  pending_.reset();
  prog_.reset();
  running_ = false;
  recomputes_.Forget();
}

cudaEvent_t Executor::RecordLocked(StreamKey stream) {
  cudaEvent_t e = EventLocked();
  if (e == nullptr || api_.cudaEventRecord(e, StreamOf(stream)) != cudaSuccess) return nullptr;
  return e;
}

Executor::Residency Executor::steady_residency() const {
  std::lock_guard<std::mutex> lock(mu_);
  return meter_.steady_residency();
}

bool Executor::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_ != nullptr;
}

Executor::ProgramTime Executor::program_time() const {
  std::lock_guard<std::mutex> lock(mu_);
  return meter_.program_time(prog_);
}

Executor::LinkRates Executor::link_rates() const {
  std::lock_guard<std::mutex> lock(mu_);
  return meter_.link().rates();
}

void Executor::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  managed_->Finish();  // every event a mover job records is recorded
  meter_.Flush(*stats_);
}

void Executor::StartIterationLocked(uint64_t n) {
  ReplayMeter::IterationTag ended;
  if (!EndIterationLocked(&ended)) return;
  if (pending_ != nullptr) StartProgramLocked();
  diverged_ = false;
  running_ = prog_ != nullptr && (owned_ || managed_->EnsureStreams());
  // Events of the iteration before the last are measured and recycled: the mover jobs recording them have run.
  managed_->StartIteration();
  meter_.NextIteration(*stats_);
  if (!running_) return;
  const ReplayProgram& p = *prog_;
  stats_->replayed_iterations.fetch_add(1, std::memory_order_relaxed);
  prefetched_.assign(p.actions, nullptr);
  evicted_.assign(p.buffers.size(), nullptr);
  away_.assign(p.buffers.size(), 0);
  recomputes_.StartIteration(p);
  allocations_.Track(p, IterationIndex(n, base_, p.period));
  cudaEvent_t start = RecordLocked(p.stream[0]);
  meter_.StartReplayedIteration(start, ended, p, OwnedLocked());
  IssueLocked(0, p.stream[0]);
}

bool Executor::EndIterationLocked(ReplayMeter::IterationTag* ended) {
  // The iteration that ends here, for its time (ProgramTime).
  *ended = meter_.EndIteration(running_ && !diverged_);
  if (running_ && diverged_) {
    divergence_.streak++;
  } else if (running_) {
    divergence_.streak = 0;
  }
  if (divergence_.streak >= kDivergentIterationsBeforeRerecord) {
    divergence_.streak = 0;
    running_ = false;
    if (divergence_.rerecords < kMaxRerecords) {
      divergence_.rerecords++;
      divergence_.period = prog_ != nullptr ? prog_->period : 0;
      KARMA_LOG(kInfo, "{} iterations in a row diverged from the plan: recording again",
                kDivergentIterationsBeforeRerecord);
      request_.store(static_cast<uint8_t>(Request::kRerecord), std::memory_order_release);
      meter_.ForgetResidency();  // of a program that was not the iteration
      armed_.store(false, std::memory_order_relaxed);
      prog_.reset();
      pending_.reset();
      return false;
    }
  }
  // The actions anchored after the last op of the iteration that just ended.
  if (running_ && !diverged_ && prog_ != nullptr && last_done_ == prog_->period - 1) {
    IssueLocked(prog_->period, prog_->stream[prog_->period - 1]);
  }
  last_done_ = kNoPosition;
  deferred_.clear();  // prefetches for ops of the last iteration that never came
  return true;
}

void Executor::StartProgramLocked() {
  prog_ = std::move(pending_);
  pending_.reset();
  idle_ = prog_->Idle();
  meter_.StartProgram(*prog_);
  recomputes_.StartProgram(*prog_);
  evicted_.clear();  // the previous program's buffers
  KARMA_LOG(kInfo, "replaying the plan from iteration {}: {}",
            stats_->iteration.load(std::memory_order_relaxed), prog_->summary);
}

void Executor::SetLaunch(uint32_t position, Relaunch launch) {
  std::lock_guard<std::mutex> lock(mu_);
  if (prog_ == nullptr) return;
  recomputes_.SetLaunch(position, std::move(launch));
}

uint32_t Executor::Before(uint64_t n, uint64_t shape, StreamKey stream, bool* wants_launch) {
  *wants_launch = false;
  std::lock_guard<std::mutex> lock(mu_);
  const ReplayProgram* p = prog_ != nullptr ? prog_.get() : pending_.get();
  if (p == nullptr || n < base_) return kNoPosition;
  // With markers, ops past the marked iteration's length before the next marker (a final copy, a log line every
  // few iterations) lie outside every iteration: no position, and no divergence.
  if (marks_ > 0 && n - base_ >= p->period) return kNoPosition;
  const auto pos = static_cast<uint32_t>((n - base_) % p->period);
  try {
    if (pos == 0) StartIterationLocked(n);
    if (!running_ || diverged_ || prog_ == nullptr) return kNoPosition;
    const ReplayProgram& prog = *prog_;
    if (shape != prog.shape[pos] || stream != prog.stream[pos]) {
      KARMA_LOG(kDebug, "op {} of the iteration is not the recorded one{}: planned actions stop until the next "
                "iteration", pos, stream != prog.stream[pos] ? " (another stream)" : "");
      DivergeLocked();
      return kNoPosition;
    }
    // Actions anchored after the previous op go out now rather than right after its launch: the frees the
    // application makes in between (the plan's "freed after its last use") then happen before the prefetches
    // that count on that room.
    const bool issues = pos > 0 && last_done_ == pos - 1 && !prog.after[pos].empty();
    if (issues) IssueLocked(pos, prog.stream[pos - 1]);
    IssueDeferredLocked(UINT32_MAX);
    for (uint32_t r : prog.recompute_before[pos]) RunRecomputeLocked(r, stream);
    for (uint32_t a : prog.waits[pos]) {
      if (prefetched_[a] == nullptr) IssueDeferredLocked(a);  // needed now: room or not
      cudaEvent_t done = prefetched_[a];
      if (done == nullptr) continue;
      residency_->Recorded(done);
      LastErrorScope errors(api_);
      if (api_.cudaEventQuery(done) == cudaSuccess) {
        stats_->prefetch_hits.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      errors.Failed();  // cudaErrorNotReady is not the application's
      cudaEvent_t waiting = RecordLocked(stream);
      if (api_.cudaStreamWaitEvent(StreamOf(stream), done, 0) != cudaSuccess) errors.Failed();
      meter_.Stall(waiting, done);
    }
    // Only once the mover threads have issued what they were given: a lagging one would show its moves undone.
    if (owned_ || managed_->Issued()) {
      meter_.SampleBefore(pos, prog_.get(), OwnedLocked(), issues || pos == 0);  // 0: the iteration's start
    }
    for (trace::BufferId b : prog.reads[pos]) {
      if (away_[b] == 0) continue;
      away_[b] = 0;  // demand paging brings it back
      stats_->faults.fetch_add(1, std::memory_order_relaxed);
    }
    *wants_launch = prog.in_recompute[pos];
    if (LogEnabled(LogLevel::kDebug)) {
      size_t free = 0, total = 0;
      if (RealMemGetInfo(api_, &free, &total)) {
        // The copy path's pool stays full: what it holds of live values.
        const uint64_t held = owned_ ? residency_->live_bytes() : total - free;
        KARMA_LOG(kDebug, "op {}: {:.1f} MiB on the device, {:.1f} MiB planned", pos,
                  static_cast<double>(held) / (1 << 20),
                  static_cast<double>(prog.planned_bytes[pos]) / (1 << 20));
      }
    }
  } catch (...) {
    // Out of memory in bookkeeping: stop replaying; paging keeps the application correct.
    running_ = false;
    return kNoPosition;
  }
  return pos;
}

void Executor::After(uint32_t pos, bool ok) {
  if (pos == kNoPosition) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!running_ || diverged_ || prog_ == nullptr || pos >= prog_->period) return;
  last_done_ = pos;
  if (!ok) {
    KARMA_LOG(kDebug, "op {} of the iteration failed: planned actions stop until the next iteration", pos);
    DivergeLocked();  // the op did not run as recorded
    return;
  }
}

bool Executor::AddressLocked(trace::BufferId b, Range* r) const {
  const ReplayBuffer& rb = prog_->buffers[b];
  r->bytes = rb.bytes;
  if (!rb.allocated_inside) {
    r->addr = rb.address;
    return true;
  }
  const uint64_t base = allocations_.Live(rb.alloc_ordinal);
  if (base == 0) return false;
  r->addr = base;
  return true;
}

bool Executor::MoveRangeLocked(trace::BufferId b, Range* r) const {
  if (!AddressLocked(b, r)) return false;
  // A large arena block owns its last, partly used page too: moving or discarding up to that page's end frees
  // it (a discard frees only pages it covers entirely).
  const ReplayBuffer& rb = prog_->buffers[b];
  if (rb.origin == Origin::kArena && rb.bytes > kSmallLimit) {
    r->data = rb.bytes;  // what a move copies: the rest of the last page holds nothing
    r->bytes = AlignUp(rb.bytes, page_);
  }
  return true;
}

bool Executor::Movable(trace::BufferId b) const { return rt::Movable(prog_->buffers[b].origin); }

uint64_t Executor::ScratchBytes(trace::BufferId b) const { return AlignUp(prog_->buffers[b].bytes, page_); }

std::vector<Executor::Range> Executor::ScratchOf(
    const std::vector<std::pair<trace::BufferId, uint64_t>>& redirected) const {
  std::vector<Range> scratch;  // slots shared by several outputs, once
  for (const auto& [b, at] : redirected) {
    if (std::none_of(scratch.begin(), scratch.end(), [&](const Range& x) { return x.addr == at; })) {
      scratch.push_back({at, ScratchBytes(b)});
    }
  }
  return scratch;
}

Executor::Range Executor::OwnedPages(const Range& r) const {
  const uint64_t lo = AlignUp(r.addr, page_), hi = AlignDown(r.addr + r.bytes, page_);
  Range owned{lo, hi > lo ? hi - lo : 0};
  if (r.data < r.bytes) owned.data = r.addr + r.data > lo ? r.addr + r.data - lo : 0;
  return owned;
}

std::vector<ResidencyRange> Executor::PagesLocked(const std::vector<Range>& ranges) const {
  if (!owned_) return ranges;  // managed memory moves pages a range touches; a discard frees only those it covers
  // Only pages a range owns move on the copy path: a page it shares holds a neighbour's bytes, which work may be
  // using while a remap would change what the page's addresses reach.
  std::vector<ResidencyRange> pages;
  for (const Range& r : ranges) {
    const Range owned = OwnedPages(r);
    if (owned.bytes != 0) pages.push_back(owned);
  }
  return pages;
}

void Executor::MakeForLocked(const std::vector<Range>& ranges, cudaStream_t s) {
  if (ranges.empty()) return;
  LastErrorScope errors(api_);
  const ResidencyTicket t = residency_->Make(PagesLocked(ranges), {}, s);
  if (!residency_->WaitOn(t, s).ok()) errors.Failed();
}

void Executor::DropLocked(cudaEvent_t after, const std::vector<Range>& ranges, bool held, cudaStream_t user) {
  if (ranges.empty()) return;
  const cudaEvent_t waits[] = {after};
  residency_->Drop(PagesLocked(ranges), waits, held, user);
}

cudaEvent_t Executor::MoveLocked(const std::vector<cudaEvent_t>& waits, const std::vector<Range>& ranges,
                                 bool to_device) {
  uint64_t bytes = 0;
  for (const Range& r : ranges) bytes += r.bytes;
  (to_device ? stats_->prefetched_bytes : stats_->evicted_bytes).fetch_add(bytes, std::memory_order_relaxed);
  MoveEvents events{EventLocked(), nullptr};
  if (events.done == nullptr) return nullptr;
  // Managed moves are timed from when the stream starts them (after their waits and the moves before them) to
  // their completion: the host link's rates (LinkMeter).
  if (!owned_ && meter_.link().timing()) events.started = EventLocked();
  if (events.started != nullptr) meter_.link().Add({events.started, events.done, bytes, to_device});
  const std::vector<ResidencyRange> pages = PagesLocked(ranges);
  const ResidencyTicket t =
      to_device ? residency_->Fetch(pages, waits, events) : residency_->Evict(pages, waits, events);
  return t.seq != 0 ? events.done : nullptr;  // no seq: nothing was to be moved
}

bool Executor::MoveForHost(uint64_t addr, uint64_t bytes, bool to_device, cudaEvent_t done) {
  std::lock_guard lock(mu_);
  const ResidencyRange pages[] = {OwnedPages({addr, bytes})};
  if (pages[0].bytes == 0) return false;
  (to_device ? stats_->prefetched_bytes : stats_->evicted_bytes).fetch_add(pages[0].bytes, std::memory_order_relaxed);
  const MoveEvents events{done, nullptr};
  const ResidencyTicket t = to_device ? residency_->Fetch(pages, {}, events) : residency_->Evict(pages, {}, events);
  if (t.seq == 0) return false;
  residency_->Recorded(done);  // a mover thread may issue it: the caller waits on it next
  return true;
}

bool Executor::PlanBringsBack(uint64_t addr) const {
  std::lock_guard lock(mu_);
  const ReplayProgram* p = pending_ ? pending_.get() : prog_.get();
  if (p == nullptr) return false;
  for (size_t b = 0; b < p->brought_back.size(); ++b) {
    const ReplayBuffer& rb = p->buffers[b];
    if (p->brought_back[b] && addr >= rb.address && addr < rb.address + rb.bytes) return true;
  }
  return false;
}

void Executor::IssueLocked(uint32_t k, StreamKey stream) {
  const ReplayProgram& p = *prog_;
  const std::vector<ReplayProgram::Item>& items = p.after[k];
  if (items.empty()) return;
  LastErrorScope errors(api_);
  cudaEvent_t anchor = RecordLocked(stream);
  if (anchor == nullptr) {
    errors.Failed();
    return;
  }
  std::vector<Range> out, drop;
  std::vector<trace::BufferId> out_ids, drop_ids;
  bool prefetches = false;
  for (const ReplayProgram::Item& it : items) {
    Range r;
    if (!Movable(it.buffer) || !MoveRangeLocked(it.buffer, &r) || r.bytes == 0) continue;
    ReplayProgram::Move move = it.move;
    if (move == ReplayProgram::Move::kDiscard &&
        (recomputes_.check(it.recompute) != RecomputeState::Check::kValid || !allocations_.trusted())) {
      move = ReplayProgram::Move::kEvict;  // not (yet) trusted to rebuild it, or not here: keep the value
    }
    switch (move) {
      case ReplayProgram::Move::kPrefetch:
        prefetches = true;
        break;
      case ReplayProgram::Move::kEvict: {
        // Only pages the buffer owns leave: a page shared with a neighbour (a small buffer in a slab, a tensor
        // inside a caching allocator's segment) would take the neighbour's bytes with it, and it would fault.
        const Range owned = OwnedPages(r);
        if (owned.bytes == 0) break;
        out.push_back(owned);
        out_ids.push_back(it.buffer);
        break;
      }
      case ReplayProgram::Move::kDiscard:
        drop.push_back(r);
        drop_ids.push_back(it.buffer);
        recomputes_.Discarded(it.recompute);
        break;
    }
  }
  if (!out.empty()) {
    cudaEvent_t done = MoveLocked({anchor}, out, false);
    for (trace::BufferId b : out_ids) {
      evicted_[b] = done;
      away_[b] = 1;
    }
  }
  if (!drop.empty()) {
    // Later uses of the pages come after the drop: by the copy residency's order of moves (a make, a fetch), and
    // on the application's stream for managed memory.
    DropLocked(anchor, drop, /*held=*/true, StreamOf(stream));
    for (size_t i = 0; i < drop.size(); ++i) {
      away_[drop_ids[i]] = 1;
      stats_->discarded_bytes.fetch_add(drop[i].bytes, std::memory_order_relaxed);
    }
  }
  if (prefetches) {
    deferred_.push_back({k, anchor});
    IssueDeferredLocked(UINT32_MAX);
  }
}

bool Executor::RoomLocked(uint32_t k) const {
  for (trace::BufferId b : prog_->room_from[k]) {
    Range r;
    if (away_[b] == 0 && AddressLocked(b, &r)) return false;  // still allocated and on the device
  }
  return true;
}

void Executor::IssueDeferredLocked(uint32_t needed_action) {
  const ReplayProgram& p = *prog_;
  while (!deferred_.empty()) {
    const Deferred d = deferred_.front();
    bool needed = false;
    for (const ReplayProgram::Item& it : p.after[d.k]) {
      needed = needed || (it.move == ReplayProgram::Move::kPrefetch && it.action == needed_action);
    }
    // First-in first-out, like the copy engine the plan assumes: a later batch never overtakes a waiting one.
    if (!needed && !RoomLocked(d.k)) return;
    deferred_.pop_front();
    // One batch per waiting op, in the order they are needed: an op waits for its own data, not for data a later
    // op needs that happens to leave at the same point.
    std::vector<const ReplayProgram::Item*> items;
    for (const ReplayProgram::Item& it : p.after[d.k]) {
      if (it.move == ReplayProgram::Move::kPrefetch) items.push_back(&it);
    }
    std::stable_sort(items.begin(), items.end(), [](const auto* x, const auto* y) { return x->need < y->need; });
    bool anchored = false;
    for (size_t first = 0; first < items.size();) {
      size_t end = first;
      while (end < items.size() && items[end]->need == items[first]->need) end++;
      std::vector<Range> in;
      std::vector<trace::BufferId> in_ids;
      for (size_t i = first; i < end; ++i) {
        Range r;
        if (!Movable(items[i]->buffer) || !MoveRangeLocked(items[i]->buffer, &r) || r.bytes == 0) continue;
        in.push_back(r);
        in_ids.push_back(items[i]->buffer);
      }
      if (!in.empty()) {
        std::vector<cudaEvent_t> waits;
        if (!anchored) waits.push_back(d.anchor);
        anchored = true;
        // A buffer evicted earlier in this iteration comes back only after its write-back.
        for (trace::BufferId b : in_ids) {
          if (evicted_[b] != nullptr) waits.push_back(evicted_[b]);
        }
        cudaEvent_t done = MoveLocked(waits, in, true);
        for (trace::BufferId b : in_ids) away_[b] = 0;
        for (size_t i = first; i < end; ++i) {
          if (Has(in_ids, items[i]->buffer)) prefetched_[items[i]->action] = done;
        }
      }
      first = end;
    }
    if (needed) return;
  }
}

std::string Executor::PlaceLocked(const ReplayProgram::Recompute& rc,
                                  std::vector<std::pair<trace::BufferId, uint64_t>>* redirected) {
  const ReplayProgram& p = *prog_;
  std::vector<trace::BufferId> gone;
  for (trace::BufferId b : rc.used) {
    Range r;
    if (AddressLocked(b, &r)) continue;
    // Gone: an output the application has freed may go to scratch; an input cannot be recomputed from.
    if (!Has(rc.written, b) || Has(rc.targets, b)) {
      return fmt::format("buffer {} is not allocated at that point", b);
    }
    gone.push_back(b);
  }
  // Outputs whose memory holds a newer value by then go to scratch too.
  for (trace::BufferId b : rc.scratch) gone.push_back(b);
  if (gone.empty()) return {};
  // Scratch slots are shared by outputs whose uses within the recompute do not overlap (one layer's temporary
  // dies before the next layer's is born), as the plan's memory assumes.
  struct Slot {
    uint64_t offset = 0, bytes = 0;
    size_t free_after = 0;  // index in rc.ops of the last op using the current occupant
  };
  std::vector<Slot> slots;
  std::vector<uint64_t> offset_of(gone.size(), 0);
  uint64_t scratch_needed = 0;
  for (size_t g = 0; g < gone.size(); ++g) {
    size_t first = rc.ops.size(), last = 0;
    for (size_t i = 0; i < rc.ops.size(); ++i) {
      if (!Has(p.uses[rc.ops[i]], gone[g])) continue;
      first = std::min(first, i);
      last = i;
    }
    const uint64_t bytes = ScratchBytes(gone[g]);
    Slot* slot = nullptr;
    for (Slot& s : slots) {
      if (s.bytes >= bytes && s.free_after < first) slot = &s;
    }
    if (slot == nullptr) {
      slots.push_back({scratch_needed, bytes, 0});
      scratch_needed += bytes;
      slot = &slots.back();
    }
    slot->free_after = last;
    offset_of[g] = slot->offset;
  }
  if (scratch_.bytes < scratch_needed) {
    // The copy path makes the scratch's pages when the recompute uses them; managed memory pages it in.
    auto reserved = residency_->Reserve(owned_ ? AlignUp(scratch_needed, page_) : scratch_needed, /*on_device=*/false);
    if (!reserved.ok()) return "no scratch memory: " + reserved.status().message();
    scratch_ = {*reserved, scratch_needed};  // the smaller one is kept: never freed
  }
  for (size_t g = 0; g < gone.size(); ++g) redirected->push_back({gone[g], scratch_.addr + offset_of[g]});
  return {};
}

bool Executor::RelaunchLocked(const ReplayProgram::Recompute& rc,
                              const std::vector<std::pair<trace::BufferId, uint64_t>>& redirected,
                              const std::vector<std::vector<Range>>* populate, cudaStream_t stream) {
  const ReplayProgram& p = *prog_;
  for (size_t i = 0; i < rc.ops.size(); ++i) {
    const trace::OpId op = rc.ops[i];
    const Relaunch& launch = recomputes_.launch(op);
    if (launch == nullptr) return false;
    if (populate != nullptr) MakeForLocked((*populate)[i], stream);
    AddressMap map;
    for (trace::BufferId b : p.uses[op]) {
      const ReplayBuffer& rb = p.buffers[b];
      // Where the launch's pointer points: this iteration's place for a fresh launch, the recording's else.
      uint64_t from = rb.address;
      if (recomputes_.fresh(op) && rb.allocated_inside) {
        from = allocations_.Placed(rb.alloc_ordinal);
        if (from == 0) continue;
      }
      uint64_t to = 0;
      for (const auto& [gone, scratch] : redirected) {
        if (gone == b) to = scratch;
      }
      Range now;
      if (to == 0 && AddressLocked(b, &now)) to = now.addr;
      if (to != 0 && to != from) map.entries.push_back({from, rb.bytes, to});
    }
    if (!(*launch)(map)) return false;
  }
  stats_->recomputed_kernels.fetch_add(rc.ops.size(), std::memory_order_relaxed);
  return true;
}

void Executor::RunRecomputeLocked(uint32_t r, StreamKey stream) {
  const ReplayProgram::Recompute& rc = prog_->recomputes[r];
  if (recomputes_.check(r) == RecomputeState::Check::kUnvalidated) {
    ValidateLocked(r, stream);
    return;
  }
  if (!recomputes_.TakeDiscarded(r)) return;  // its targets kept their values (evicted): demand paging brings them
  std::vector<std::pair<trace::BufferId, uint64_t>> redirected;
  const std::string unplaced = PlaceLocked(rc, &redirected);
  bool ok = unplaced.empty();
  if (ok) {
    // The discarded targets and the scratch are populated without a transfer, sparing the launches a fault on
    // every page they write; each just before the first launch that writes it, as the plan allocates them, so
    // that the device never holds more than the plan counts.
    std::vector<std::vector<Range>> populate(rc.ops.size());
    std::vector<uint64_t> done;
    auto add = [&](trace::BufferId b, const Range& r) {
      if (Has(done, r.addr)) return;
      for (size_t i = 0; i < rc.ops.size(); ++i) {
        if (!Has(prog_->uses[rc.ops[i]], b)) continue;
        populate[i].push_back(r);
        done.push_back(r.addr);
        return;
      }
    };
    for (trace::BufferId b : rc.targets) {
      Range t;
      if (MoveRangeLocked(b, &t)) add(b, t);
    }
    for (const auto& [b, at] : redirected) add(b, Range{at, ScratchBytes(b)});
    ok = RelaunchLocked(rc, redirected, &populate, StreamOf(stream));
  }
  if (!ok) {
    // The targets are discarded and cannot be rebuilt: this is a failure the application would see.
    KARMA_LOG(kError, "a recompute could not be issued ({}); results of this iteration may be wrong",
              unplaced.empty() ? "a launch failed" : unplaced);
  }
  for (trace::BufferId b : rc.targets) away_[b] = 0;
  // The scratch outputs are dead once the launches have run, and so are the values the plan lets go there, each
  // rebuilt by a later recompute trusted to (else kept, like a discard the check has not cleared yet).
  const std::vector<Range> scratch = ScratchOf(redirected);
  std::vector<Range> dropped;
  for (const ReplayProgram::Recompute::Dropped& d : rc.dropped) {
    Range range;
    if (!ok || !allocations_.trusted() || !Movable(d.buffer) || !MoveRangeLocked(d.buffer, &range) ||
        range.bytes == 0) {
      continue;
    }
    if (d.rebuilt_by != trace::kNone && recomputes_.check(d.rebuilt_by) != RecomputeState::Check::kValid) continue;
    dropped.push_back(range);
    away_[d.buffer] = 1;
    if (d.rebuilt_by != trace::kNone) recomputes_.Discarded(d.rebuilt_by);
    stats_->discarded_bytes.fetch_add(range.bytes, std::memory_order_relaxed);
  }
  if (scratch.empty() && dropped.empty()) return;
  LastErrorScope errors(api_);
  if (cudaEvent_t ran = RecordLocked(stream)) {
    DropLocked(ran, scratch, /*held=*/false, StreamOf(stream));
    DropLocked(ran, dropped, /*held=*/true, StreamOf(stream));
  } else {
    errors.Failed();
  }
}

void Executor::ValidateLocked(uint32_t r, StreamKey stream) {
  const ReplayProgram::Recompute& rc = prog_->recomputes[r];
  if (api_.cudaMemcpyAsync == nullptr || api_.cudaStreamSynchronize == nullptr) {
    RejectLocked(r, "no way to copy device memory for the check");
    return;
  }
  // Where this iteration's buffers are is not known: the check waits for the next iteration.
  if (!allocations_.trusted()) return;
  std::vector<std::pair<trace::BufferId, uint64_t>> redirected;
  if (const std::string why = PlaceLocked(rc, &redirected); !why.empty()) {
    RejectLocked(r, why);
    return;
  }
  LastErrorScope errors(api_);
  const cudaStream_t s = StreamOf(stream);
  if (!Sync(api_, s, errors)) {
    RejectLocked(r, "the stream could not be synchronized");
    return;
  }
  // On the copy path a page being evicted is remapped once its copy is done: the check's writes must come after.
  if (owned_) {
    for (trace::BufferId b : rc.used) {
      if (evicted_[b] != nullptr && api_.cudaEventSynchronize(evicted_[b]) != cudaSuccess) errors.Failed();
    }
  }
  std::vector<BufferCopy> before;
  if (!CopyOutLocked(rc, redirected, s, errors, &before)) {
    RejectLocked(r, "a buffer could not be copied");
    return;
  }
  if (!Sync(api_, s, errors)) {
    RejectLocked(r, "the stream could not be synchronized");
    return;
  }
  std::vector<std::vector<unsigned char>> poison;
  // When a write fails the buffers are restored below.
  const bool poisoned = PoisonLocked(rc, before, s, errors, &poison) && Sync(api_, s, errors);
  // The scratch gets device memory for the check's launches (on the copy path; managed memory pages it in), and
  // gives it back after them.
  const std::vector<Range> scratch = ScratchOf(redirected);
  if (poisoned && owned_) MakeForLocked(scratch, s);
  const bool launched = poisoned && RelaunchLocked(rc, redirected, nullptr, s) && Sync(api_, s, errors);
  if (!scratch.empty()) {
    if (cudaEvent_t ran = RecordLocked(stream)) DropLocked(ran, scratch, /*held=*/false, s);
  }
  if (launched && SameLocked(before, s, errors)) {
    recomputes_.Accept(*prog_, r);
    KARMA_LOG(kInfo, "recompute of {} launch{} before op {} validated ({} buffers bit-identical)", rc.ops.size(),
              rc.ops.size() == 1 ? "" : "es", rc.before, before.size());
    return;
  }
  // Put everything back as it was.
  for (const BufferCopy& c : before) {
    if (api_.cudaMemcpyAsync(reinterpret_cast<void*>(c.r.addr), c.bytes.data(), c.r.bytes, cudaMemcpyHostToDevice, s) !=
        cudaSuccess) {
      errors.Failed();
    }
  }
  Sync(api_, s, errors);
  RejectLocked(r, launched   ? "the recomputed buffers differ from the originals"
                  : poisoned ? "a launch failed"
                             : "the targets could not be overwritten for the check");
}

void Executor::RejectLocked(uint32_t r, const std::string& why) {
  const ReplayProgram::Recompute& rc = prog_->recomputes[r];
  recomputes_.Reject(*prog_, r);
  KARMA_LOG(kInfo, "recompute of {} launch{} before op {} rejected: {}", rc.ops.size(), rc.ops.size() == 1 ? "" : "es",
            rc.before, why);
  request_.store(static_cast<uint8_t>(Request::kReplan), std::memory_order_release);
}

bool Executor::CopyOutLocked(const ReplayProgram::Recompute& rc,
                             const std::vector<std::pair<trace::BufferId, uint64_t>>& redirected, cudaStream_t s,
                             LastErrorScope& errors, std::vector<BufferCopy>* copies) const {
  for (trace::BufferId b : rc.used) {
    if (std::any_of(redirected.begin(), redirected.end(), [&](const auto& g) { return g.first == b; })) continue;
    BufferCopy c;
    c.b = b;
    AddressLocked(b, &c.r);
    c.bytes.resize(c.r.bytes);
    if (api_.cudaMemcpyAsync(c.bytes.data(), reinterpret_cast<const void*>(c.r.addr), c.r.bytes,
                             cudaMemcpyDeviceToHost, s) != cudaSuccess) {
      errors.Failed();
      return false;
    }
    copies->push_back(std::move(c));
  }
  return true;
}

bool Executor::PoisonLocked(const ReplayProgram::Recompute& rc, const std::vector<BufferCopy>& copies,
                            cudaStream_t s, LastErrorScope& errors,
                            std::vector<std::vector<unsigned char>>* poison) const {
  // A launch leaving any of those bytes as they were cannot pass.
  for (const BufferCopy& c : copies) {
    Range mr;
    if (!Has(rc.targets, c.b) || !MoveRangeLocked(c.b, &mr)) continue;
    const Range owned = OwnedPages(mr);
    const uint64_t lo = std::max(owned.addr, c.r.addr);
    const uint64_t hi = std::min(owned.addr + owned.bytes, c.r.addr + c.r.bytes);
    if (hi <= lo) continue;
    std::vector<unsigned char>& flipped = poison->emplace_back(c.bytes.begin() + (lo - c.r.addr),
                                                               c.bytes.begin() + (hi - c.r.addr));
    for (unsigned char& x : flipped) x = static_cast<unsigned char>(~x);
    if (api_.cudaMemcpyAsync(reinterpret_cast<void*>(lo), flipped.data(), flipped.size(), cudaMemcpyHostToDevice, s) !=
        cudaSuccess) {
      errors.Failed();
      return false;
    }
  }
  return true;
}

bool Executor::SameLocked(const std::vector<BufferCopy>& copies, cudaStream_t s, LastErrorScope& errors) const {
  std::vector<unsigned char> after;
  for (const BufferCopy& c : copies) {
    after.resize(c.bytes.size());
    if (api_.cudaMemcpyAsync(after.data(), reinterpret_cast<const void*>(c.r.addr), c.r.bytes, cudaMemcpyDeviceToHost,
                             s) != cudaSuccess ||
        !Sync(api_, s, errors)) {
      errors.Failed();
      return false;
    }
    if (after != c.bytes) return false;
  }
  return true;
}

void Executor::DivergeLocked() {
  diverged_ = true;
  stats_->divergences.fetch_add(1, std::memory_order_relaxed);
  // Buffers discarded for a recompute that will not run now: rebuild them before anything else can read them.
  const ReplayProgram& p = *prog_;
  for (uint32_t r = 0; r < p.recomputes.size(); ++r) {
    if (recomputes_.discarded(r)) RunRecomputeLocked(r, p.stream[p.recomputes[r].before]);
  }
}

void Executor::OnAllocation(uint64_t addr, uint64_t size, uint64_t next_op, StreamKey stream, bool arena_block) {
  std::lock_guard<std::mutex> lock(mu_);
  const ReplayProgram* p = prog_ != nullptr ? prog_.get() : pending_.get();
  if (p == nullptr || next_op < base_) return;
  if (running_ && arena_block && !idle_ && !owned_ && api_.cudaMemPrefetchAsync != nullptr) {
    // Freed blocks were discarded; a block's first touch would fault each page in. Populating them now costs no
    // transfer and spares the op that writes the tensor the faults.
    managed_->PopulateAllocation(addr, size, StreamOf(stream == kSyncStream ? 0 : stream));
  }
  allocations_.Track(*p, IterationIndex(next_op, base_, p->period));
  allocations_.Add(*p, addr, size);
}

void Executor::OnFree(uint64_t addr, uint64_t span, StreamKey stream, bool arena_block,
                      std::span<const std::pair<uint64_t, uint64_t>> slab_pages) {
  std::lock_guard<std::mutex> lock(mu_);
  if (prog_ == nullptr) return;
  allocations_.Freed(addr);
  // A small block shares its slab page with others: the caller names the slab pages it leaves without a live
  // block (`slab_pages`); discarding only part of a page would poison neighbours' bytes.
  try {
    if (owned_) return;  // ResidencyOnFree
    std::vector<Range> drop;
    if (arena_block && span >= kLargePage && span % kLargePage == 0) drop.push_back({addr, span});
    for (const auto& [page, bytes] : slab_pages) drop.push_back({page, bytes});
    if (drop.empty() || idle_ || api_.cudaMemDiscardBatchAsync == nullptr) return;
    LastErrorScope errors(api_);
    const StreamKey key = stream == kSyncStream ? 0 : stream;
    // Dead once the freeing stream gets here; nothing it runs later may come before the discard.
    if (cudaEvent_t freed = RecordLocked(key)) {
      DropLocked(freed, drop, /*held=*/false, StreamOf(key));
    } else {
      errors.Failed();
    }
  } catch (...) {
    // Out of memory in bookkeeping: the pages stay on the device until reused, as without a plan.
  }
}

void Executor::ResidencyOnAllocation(uint64_t addr, uint64_t span, StreamKey stream) {
  std::lock_guard<std::mutex> lock(mu_);
  // Pages that were dropped or evicted (or never had room) get device memory before the application writes them.
  const StreamKey key = stream == kSyncStream ? 0 : stream;
  // At once: the residency waits for the last use of each page's old value (its drop), not for the stream.
  MakeForLocked({Range{addr, span}}, StreamOf(key));
}

void Executor::ResidencyOnFree(uint64_t addr, uint64_t span, StreamKey stream,
                               std::span<const std::pair<uint64_t, uint64_t>> empty_slabs) {
  std::lock_guard<std::mutex> lock(mu_);
  // The value is dead once the freeing stream gets here: its whole pages go back to the pool, and so do the pages
  // of slabs this free leaves without a live block.
  std::vector<Range> dead;
  if (OwnedPages(Range{addr, span}).bytes != 0) dead.push_back({addr, span});
  for (const auto& [page, bytes] : empty_slabs) dead.push_back({page, bytes});
  if (dead.empty()) return;
  LastErrorScope errors(api_);
  const StreamKey key = stream == kSyncStream ? 0 : stream;
  cudaEvent_t freed = RecordLocked(key);
  if (freed == nullptr) {
    errors.Failed();
    return;
  }
  DropLocked(freed, dead, /*held=*/false, StreamOf(key));
}

void Executor::OnMarker(uint64_t next_op) {
  std::lock_guard<std::mutex> lock(mu_);
  base_ = next_op;  // positions count from the marked start
  marks_++;
}

}  // namespace karma::rt
