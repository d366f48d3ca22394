// The observer: the registry's births, the two detectors, the recording life cycle and iteration counting.
#include "runtime/observe/observer.h"

#include <algorithm>
#include <cstdio>

#include "ground/common/log.h"
#include "ground/common/wall_time.h"
#include "runtime/observe/relaunch.h"

namespace karma::rt {
namespace {

// Ops observed without finding an iteration before detection gives up (its cost is per op).
constexpr uint64_t kGiveUpOps = 2'000'000;
constexpr uint64_t kGiveUpDivergences = 100;
// Iterations the detector by shapes must have held its period, with the one by buffers and offsets locked on
// none, before it is used instead.
constexpr uint64_t kShapeFallbackBoundaries = 4;

}  // namespace

// ---- Births ----

Births::Birth Births::Name(uint64_t size, StreamKey stream, uint64_t bytes) {
  // Identical layers allocate after identical ops, so buffers of one group that are alive together (every layer's
  // weights, every layer's saved activations) are told apart by how many of the group were alive before: otherwise
  // one layer's ops would look like the whole iteration.
  const uint64_t group = HashMix(HashMix(HashMix(last_op_shape_, allocs_since_op_++), size), stream);
  bytes_since_op_ += bytes;
  const uint64_t alive = live_births_[group]++;
  return Birth{HashMix(group, alive) | 1, group};  // never 0 ("not observing")
}

void Births::Died(uint64_t group) {
  auto it = live_births_.find(group);
  if (it != live_births_.end() && --it->second == 0) live_births_.erase(it);
}

uint64_t Births::OpSeen(uint64_t shape) {
  const uint64_t bytes = bytes_since_op_;
  bytes_since_op_ = 0;
  // Births name buffers by the shape of the op they follow, not its full signature: that one names buffers by
  // their births, and the chain would never repeat.
  last_op_shape_ = shape;
  allocs_since_op_ = 0;
  return bytes;
}

void Births::Pend(const BufferEntry& e) {
  // Bounded: only the allocations right before the first recorded op matter.
  if (pending_.size() >= 4096) pending_.erase(pending_.begin());
  pending_.push_back(e);
}

void Births::Reset() {
  live_births_.clear();
  pending_.clear();
}

// ---- DetectorPair ----

IterationDetector::Options DetectorPair::ShapeOptions() {
  IterationDetector::Options o;
  o.require_sync = true;
  return o;
}

IterationDetector::Step DetectorPair::Observe(uint64_t shape, uint64_t signature, uint64_t live, bool after_sync,
                                              bool launch) {
  const auto exact = exact_.Observe(signature, live, after_sync, launch);
  const auto loose = by_shape_.Observe(shape, live, after_sync, launch);
  if (loose == IterationDetector::Step::kLocked || loose == IterationDetector::Step::kDiverged) {
    KARMA_LOG(kDebug, "by shapes alone: {} at op {}",
              loose == IterationDetector::Step::kLocked ? fmt::format("period of {} ops found", by_shape_.period())
                                                        : std::string("the period diverged"),
              by_shape_.ops());
  }
  // By shapes alone only when the signatures with buffers and offsets find no iteration while the shapes have held
  // theirs for a while: the application's allocator places each iteration's tensors elsewhere.
  if (!use_shape_ && !exact_.locked() && by_shape_.boundaries() > kShapeFallbackBoundaries) {
    use_shape_ = true;
    KARMA_LOG(kInfo, "the iteration's tensors lie elsewhere every time: iterations of {} ops found from the kernels "
              "and shapes alone", by_shape_.period());
  }
  return use_shape_ ? loose : exact;
}

void DetectorPair::Reset() {
  exact_.Reset();
  by_shape_.Reset();
  use_shape_ = false;
}

void DetectorPair::Reject(uint64_t period) {
  exact_.Reject(period);
  by_shape_.Reject(period);
}

// ---- IterationCounter ----

uint64_t IterationCounter::Count(bool* starts) {
  *starts = false;
  // Only once an iteration was recorded: before, there is nothing to count against (and no atomic to pay for).
  if (!counting_.load(std::memory_order_relaxed)) return kNoIndex;
  const uint64_t n = op_counter_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t p = counted_period_.load(std::memory_order_relaxed);
  const uint64_t b = counted_boundary_.load(std::memory_order_relaxed);
  *starts = p != 0 && n >= b && (n - b) % p == 0;
  return n;
}

void IterationCounter::Start(uint64_t ops, uint64_t period) {
  op_counter_.store(ops, std::memory_order_relaxed);
  counted_boundary_.store(ops - 1 + period, std::memory_order_relaxed);
  counted_period_.store(period, std::memory_order_relaxed);
  counting_.store(true, std::memory_order_relaxed);
}

void IterationCounter::StartMarked() {
  counted_period_.store(0, std::memory_order_relaxed);
  counting_.store(true, std::memory_order_relaxed);
}

void IterationCounter::Stop() {
  counting_.store(false, std::memory_order_relaxed);
  counted_period_.store(0, std::memory_order_relaxed);
}

// ---- Observer ----

Observer::Observer(const SessionConfig& config, const CudaApi& api, Worker& worker, ObserverHost* host)
    : config_(config), api_(api), worker_(worker), host_(host), marker_mode_(!config.iteration_marker.empty()) {}

bool Observer::WantRecording() const {
  return config_.mode != Mode::kUm && !host_->RecordingDegraded() &&
         stats_->recorded_iteration.load(std::memory_order_relaxed) == 0;
}

uint32_t Observer::CaptureSite() {
  const auto s = static_cast<live::State>(stats_->state.load(std::memory_order_relaxed));
  return s == live::State::kDetecting || s == live::State::kRecording ? sites_.Capture() : 0;
}

void Observer::RegisterBuffer(uint64_t addr, uint64_t size, Origin origin, StreamKey stream, uint64_t bytes) {
  const uint32_t site = origin == Origin::kHostPinned ? 0 : CaptureSite();
  if (origin != Origin::kHostPinned) stats_->allocations.fetch_add(1, std::memory_order_relaxed);
  if (!observing_.load(std::memory_order_relaxed)) {
    registry_.Insert(addr, size, origin, site);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  // An identity for signatures that does not depend on where the allocator put the buffer.
  const Births::Birth b = births_.Name(size, stream, bytes);
  const uint64_t serial = registry_.Insert(addr, size, origin, site, b.birth, b.group);
  if (origin != Origin::kHostPinned) births_.Pend(BufferEntry{addr, size, serial, origin, site, b.birth});
}

bool Observer::ForgetBuffer(uint64_t addr, BufferEntry* e) {
  const bool known = registry_.Erase(addr, e);
  try {
    if (known && e->birth != 0 && observing_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mu_);
      births_.Died(e->birth_group);
    }
    if (known && e->origin != Origin::kHostPinned) {
      stats_->frees.fetch_add(1, std::memory_order_relaxed);
      if (recording_active_.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(mu_);
        if (recording_) {
          recording_->Buffer(*e).freed_inside = true;
          recording_->AddEvent(trace::EventKind::kFreeRequested, e->serial);
        }
      }
    }
  } catch (...) {
    host_->DegradeRecording("out of memory while recording a free");
  }
  return known;
}

void Observer::NoteUsed(uint64_t used) {
  if (recording_active_.load(std::memory_order_relaxed)) live::RaiseTo(held_peak_, used);
}

void Observer::FlushPendingAllocsLocked() {
  if (recording_) {
    for (const BufferEntry& e : births_.pending()) {
      RecordedBuffer& b = recording_->Buffer(e);
      b.allocated_inside = true;
      b.alloc_ordinal = recording_->allocations++;
      recording_->AddEvent(trace::EventKind::kAlloc, e.serial);
    }
  }
  births_.ClearPending();
}

// ---- ops ----

uint64_t Observer::CountOp() {
  bool starts = false;
  const uint64_t n = counter_.Count(&starts);
  if (starts) {
    host_->BeginIteration();
    stats_->iteration.fetch_add(1, std::memory_order_relaxed);
  }
  return n;
}

const ParamLayout& Observer::LayoutOf(const OpDesc& d) {
  return d.driver ? layouts_.ForDriver(static_cast<CUfunction>(const_cast<void*>(d.func))) : layouts_.ForRuntime(d.func);
}

uint64_t Observer::ShapeSignature(const OpDesc& d) {
  uint64_t h = HashMix(kHashSeed, static_cast<uint64_t>(d.kind));
  h = HashMix(h, reinterpret_cast<uint64_t>(d.func != nullptr ? d.func : static_cast<const void*>(d.name)));
  for (uint32_t v : d.grid) h = HashMix(h, v);
  for (uint32_t v : d.block) h = HashMix(h, v);
  return HashMix(h, d.shape);
}

uint64_t Observer::Signature(uint64_t shape, const std::vector<Touch>& touches) {
  uint64_t h = shape;
  // Which buffers, and where in them: two identical layers differ in the weights they read, and a caching
  // allocator's sub-allocations differ in offset. A buffer is named by its birth (where in the op sequence it
  // was allocated), not its address, so that an allocator placing an iteration's buffers differently every
  // time does not hide the period; buffers allocated before observation began are named by their address.
  for (const Touch& t : touches) {
    const BufferEntry& b = t.buffer;
    h = HashMix(h, b.birth != 0 ? b.birth : b.start);
    h = HashMix(h, t.operand.ptr - b.start);
  }
  return h;
}

const std::string& Observer::KernelName(const OpDesc& d) {
  auto [it, inserted] = kernel_names_.try_emplace(d.func);
  if (!inserted) return it->second;
  const char* name = nullptr;
  if (d.driver && api_.cuFuncGetName != nullptr) {
    if (api_.cuFuncGetName(&name, reinterpret_cast<CUfunction>(const_cast<void*>(d.func))) != CUDA_SUCCESS) {
      name = nullptr;
    }
  } else if (!d.driver && api_.cudaFuncGetName != nullptr) {
    LastErrorScope errors(api_);
    if (api_.cudaFuncGetName(&name, d.func) != cudaSuccess) {
      errors.Failed();
      name = nullptr;
    }
  }
  if (name != nullptr) {
    it->second = name;
  } else {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "kernel@%p", d.func);
    it->second = buf;
  }
  return it->second;
}

const ParamLayout* Observer::ScanOperands(const OpDesc& d, std::vector<Touch>* touches) {
  thread_local std::vector<PointerHit> hits;
  hits.clear();
  Registry::Reader reader(registry_);
  if (d.kind != trace::OpKind::kKernel) {
    for (size_t i = 0; i < d.operands.size(); ++i) {
      const Operand& o = d.operands[i];
      const BufferEntry* e = o.ptr != 0 ? reader.Find(o.ptr) : nullptr;
      if (e != nullptr) touches->push_back(Touch{o, *e});
    }
    return nullptr;
  }
  const ParamLayout* layout = &LayoutOf(d);
  ScanKernelArgs(*layout, d.args, reader, &hits);
  const void* buf = nullptr;
  size_t size = 0;
  if (FindExtraBuffer(d.extra, &buf, &size)) ScanArgBuffer(buf, size, reader, &hits);
  for (const PointerHit& h : hits) touches->push_back(Touch{Operand{h.value, Access::kTouch}, h.buffer});
  return layout;
}

bool Observer::DetectLocked(const OpDesc& d, uint64_t shape, const std::vector<Touch>& touches) {
  // What the iteration before this op left allocated: what was allocated for this op belongs to it.
  uint64_t live = host_->ArenaLiveBytes() + registry_.bytes(Origin::kDevice);
  live -= std::min(live, births_.OpSeen(shape));
  const bool launch = d.kind == trace::OpKind::kKernel || d.kind == trace::OpKind::kLibrary;
  const bool after_sync = sync_since_op_.exchange(false);
  const auto step = detection_.Observe(shape, Signature(shape, touches), live, after_sync, launch);
  const IterationDetector& det = detection_.used();
  if ((!det.locked() && det.ops() > kGiveUpOps) || det.divergences() > kGiveUpDivergences) {
    host_->DegradeRecording(fmt::format("no stable iteration after {} operations; mark iterations with "
                                        "KARMA_ITERATION_MARKER or karma_iteration_begin()",
                                        det.ops()));
    return false;
  }
  switch (step) {
    case IterationDetector::Step::kLocked:
      KARMA_LOG(kDebug, "period of {} ops found at op {}", det.period(), det.ops());
      stats_->period_ops.store(det.period(), std::memory_order_relaxed);
      break;
    case IterationDetector::Step::kBoundary:
      stats_->period_ops.store(det.period(), std::memory_order_relaxed);
      OnBoundaryLocked();
      break;
    case IterationDetector::Step::kDiverged:
      stats_->divergences.fetch_add(1, std::memory_order_relaxed);
      KARMA_LOG(kDebug, "iteration diverged at op {} ({})", det.ops(), d.name != nullptr ? d.name : "?");
      if (recording_) AbortRecordingLocked("the iteration diverged from the previous one");
      detection_.Diverged();
      break;
    default:
      break;
  }
  return true;
}

Observer::Observed Observer::Observe(const OpDesc& d) noexcept {
  Observed out;
  try {
    thread_local std::vector<Touch> touches;
    touches.clear();
    std::lock_guard<std::mutex> lock(mu_);
    if (marker_mode_ && !recording_) {
      births_.ClearPending();
      return out;
    }
    const ParamLayout* layout = ScanOperands(d, &touches);
    const uint64_t shape = ShapeSignature(d);
    if (!marker_mode_ && !DetectLocked(d, shape, touches)) return out;
    FlushPendingAllocsLocked();
    if (recording_) {
      out.op = AddOpLocked(d, touches, layout, shape);
      out.rec = recording_;
    }
  } catch (...) {
    host_->DegradeRecording("an internal error while observing an operation");
  }
  return out;
}

RecordedOp* Observer::AddOpLocked(const OpDesc& d, const std::vector<Touch>& touches, const ParamLayout* layout,
                                  uint64_t shape) {
  Recording& rec = *recording_;
  RecordedOp& op = rec.ops.emplace_back();
  op.kind = d.kind;
  op.name = d.kind == trace::OpKind::kKernel ? KernelName(d) : std::string(d.name != nullptr ? d.name : "op");
  op.stream_key = d.stream;
  op.stream = rec.StreamId(d.stream);
  op.flops = d.flops;
  op.bytes = d.bytes;
  op.shape = shape;
  if (d.kind == trace::OpKind::kKernel && layout != nullptr) {
    op.relaunch = MakeKernelRelaunch(d, *layout);
  } else if (d.relaunch) {
    op.relaunch = std::make_shared<const std::function<bool(const AddressMap&)>>(d.relaunch);
  }
  for (const Touch& t : touches) {
    if (t.buffer.origin == Origin::kHostPinned) continue;
    RecordedBuffer& rb = rec.Buffer(t.buffer);
    if (t.operand.workspace) rb.workspace = true;
    if (d.dtype != nullptr && rb.dtype.empty() && !t.operand.workspace) rb.dtype = d.dtype;
    const uint64_t offset = t.operand.ptr - t.buffer.start;
    const uint64_t room = t.buffer.size - std::min(t.buffer.size, offset);
    op.uses.push_back(RecordedUse{t.buffer.serial, offset, std::min(t.operand.bytes, room), t.operand.access});
    op.uses.back().gaps = t.operand.gaps;
    op.uses.back().workspace = t.operand.workspace;
  }
  op.off_device = !host_->PrefetchOperandsLocked(d, touches, rec.device);
  probes_.Before(rec, op);
  CreateOpEventsLocked(op, d.stream);
  return &op;
}

void Observer::CreateOpEventsLocked(RecordedOp& op, StreamKey stream) {
  if (api_.cudaEventCreateWithFlags == nullptr || api_.cudaEventRecord == nullptr) return;
  LastErrorScope errors(api_);
  const cudaStream_t s = StreamOf(stream);
  if (api_.cudaEventCreateWithFlags(&op.start, cudaEventDefault) != cudaSuccess ||
      api_.cudaEventCreateWithFlags(&op.end, cudaEventDefault) != cudaSuccess ||
      api_.cudaEventRecord(op.start, s) != cudaSuccess) {
    errors.Failed();
    if (api_.cudaEventDestroy != nullptr) {
      if (op.start != nullptr) api_.cudaEventDestroy(op.start);
      if (op.end != nullptr) api_.cudaEventDestroy(op.end);
    }
    op.start = op.end = nullptr;
  }
}

void Observer::EndOp(Recording& rec, RecordedOp& op, bool ok) noexcept {
  if (ok && op.end != nullptr && api_.cudaEventRecord != nullptr) {
    LastErrorScope errors(api_);
    if (api_.cudaEventRecord(op.end, StreamOf(op.stream_key)) != cudaSuccess) errors.Failed();
  }
  if (ok && !op.probes.empty()) {
    try {
      probes_.After(rec, op);
    } catch (...) {
      op.probes.clear();
    }
  }
  op.state.store(ok ? RecordedOp::kDone : RecordedOp::kFailed, std::memory_order_release);
}

void Observer::OnSync() noexcept {
  sync_since_op_.store(true, std::memory_order_relaxed);
  if (!recording_active_.load(std::memory_order_acquire)) return;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    if (recording_) recording_->AddEvent(trace::EventKind::kSync, 0);
  } catch (...) {
    host_->DegradeRecording("out of memory while recording a synchronization");
  }
}

void Observer::OnIterationMarker() noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    if (!marker_mode_) {
      marker_mode_ = true;
      if (recording_) AbortRecordingLocked("explicit iteration markers replace automatic detection");
      if (stats_->state.load(std::memory_order_relaxed) == static_cast<uint32_t>(live::State::kRecording)) {
        SetState(live::State::kDetecting);
      }
    }
    markers_++;
    host_->BeginIteration();
    TimeIterationLocked();
    host_->OnMarker(counter_.ops());
    stats_->iteration.store(markers_, std::memory_order_relaxed);
    // Allocations since the last op came before the marker: they are the ending iteration's.
    FlushPendingAllocsLocked();
    if (recording_) {
      FinishRecordingLocked();
    } else if (WantRecording() && markers_ > config_.warmup_iterations &&
               capture_depth_.load(std::memory_order_relaxed) == 0) {
      StartRecordingLocked(true);
    }
  } catch (...) {
    host_->DegradeRecording("an internal error at an iteration marker");
  }
}

bool Observer::EnterCapture() noexcept { return capture_depth_.fetch_add(1) == 0; }

void Observer::AbandonForCapture() noexcept {
  if (!observing_.load(std::memory_order_relaxed)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (recording_) AbortRecordingLocked("CUDA graph capture");
  }
  host_->DegradeRecording("CUDA graph capture: launches replayed from graphs cannot be observed");
}

bool Observer::LeaveCapture() noexcept {
  int depth = capture_depth_.load();
  while (depth > 0 && !capture_depth_.compare_exchange_weak(depth, depth - 1)) {
  }
  return depth == 1;
}

// ---- recording life cycle ----

void Observer::TimeIterationLocked() {
  const auto now = std::chrono::steady_clock::now();
  last_iteration_ns_ = boundary_at_ == std::chrono::steady_clock::time_point{} ? 0 : NsSince(boundary_at_);
  boundary_at_ = now;
}

void Observer::OnBoundaryLocked() {
  host_->BeginIteration();
  TimeIterationLocked();
  stats_->iteration.fetch_add(1, std::memory_order_relaxed);
  if (recording_) {
    FinishRecordingLocked();
  } else if (WantRecording() && (marker_mode_ || detection_.used().stable())) {
    StartRecordingLocked(marker_mode_);
  }
}

void Observer::StartRecordingLocked(bool by_marker) {
  auto rec = std::make_shared<Recording>();
  rec->before_ns = last_iteration_ns_;
  rec->iteration = stats_->iteration.load(std::memory_order_relaxed);
  rec->by_marker = by_marker;
  if (api_.cudaGetDevice != nullptr) {
    LastErrorScope errors(api_);
    if (api_.cudaGetDevice(&rec->device) != cudaSuccess) errors.Failed();
  }
  recording_ = std::move(rec);
  held_peak_.store(stats_->used_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  recording_active_.store(true, std::memory_order_release);
  SetState(live::State::kRecording);
  KARMA_LOG(kInfo, "recording iteration {}{}", recording_->iteration,
            by_marker ? " (marked)" : fmt::format(" ({} ops per iteration)", detection_.used().period()));
}

void Observer::FinishRecordingLocked() {
  std::shared_ptr<Recording> rec = std::move(recording_);
  recording_.reset();
  recording_active_.store(false, std::memory_order_release);
  rec->t_end = std::chrono::steady_clock::now();
  probes_.Release();
  // Allocations since the last op belong to the next iteration (its first op has not been seen yet).
  const auto next = [this](uint64_t serial) {
    return std::any_of(births_.pending().begin(), births_.pending().end(),
                       [&](const BufferEntry& p) { return p.serial == serial; });
  };
  for (const BufferEntry& e : registry_.Entries()) {
    if (e.origin == Origin::kHostPinned || next(e.serial)) continue;
    auto it = rec->buffers.find(e.serial);
    if (it != rec->buffers.end() && it->second.used) continue;
    rec->unused++;
    rec->unused_bytes += e.size;
    if (e.size > rec->largest_unused.size) rec->largest_unused = e;
  }
  stats_->recorded_iteration.store(std::max<uint64_t>(rec->iteration, 1), std::memory_order_relaxed);
  SetState(live::State::kRecorded);
  observing_.store(false, std::memory_order_relaxed);
  if (!marker_mode_) {
    // From here on iterations are counted by period; the current op starts one.
    counter_.Start(detection_.used().ops(), detection_.used().period());
  } else {
    counter_.StartMarked();
  }
  host_->RecordingFinished(std::move(rec));
}

void Observer::AbortRecordingLocked(const char* why) {
  std::shared_ptr<Recording> rec = std::move(recording_);
  recording_.reset();
  recording_active_.store(false, std::memory_order_release);
  probes_.Release();
  SetState(live::State::kDetecting);
  KARMA_LOG(kInfo, "recording of iteration {} abandoned: {}", rec->iteration, why);
  auto release = [this, rec] {
    const TraceContext ctx;
    (void)FinishRecording(*rec, api_, ctx);  // waits for in-flight ops and releases every event
  };
  if (!worker_.Post(release)) release();
}

void Observer::RestartRecording(uint64_t rejected_period) {
  std::lock_guard<std::mutex> lock(mu_);
  if (host_->RecordingDegraded()) return;
  if (rejected_period != 0 && !marker_mode_) {
    KARMA_LOG(kInfo, "a period of {} ops is not the iteration: detecting again without it", rejected_period);
    detection_.Reject(rejected_period);
  }
  detection_.Reset();
  births_.Reset();
  counter_.Stop();
  stats_->recorded_iteration.store(0, std::memory_order_relaxed);
  stats_->period_ops.store(0, std::memory_order_relaxed);
  SetState(live::State::kDetecting);
  observing_.store(true, std::memory_order_relaxed);
}

void Observer::EndRecordingAtExit() {
  std::lock_guard<std::mutex> lock(mu_);
  // An iteration that ran to its end but was never followed by another op is complete.
  const uint64_t period = detection_.used().period();
  if (recording_ && !marker_mode_ && period != 0 && recording_->ops.size() >= period) {
    FinishRecordingLocked();
  } else if (recording_) {
    AbortRecordingLocked("the process exited during the recorded iteration");
  }
}

}  // namespace karma::rt
