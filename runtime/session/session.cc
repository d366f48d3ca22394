// The session: lazy start, memory, op observation, recording life cycle, statistics and shutdown.
#include "runtime/session/session.h"

#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/common/log.h"
#include "runtime/trace/ktrace_io.h"

namespace karma::rt {
namespace {

std::atomic<Session*> g_test_session{nullptr};
// Ops observed without finding an iteration before detection gives up (its cost is per op).
constexpr uint64_t kGiveUpOps = 2'000'000;
constexpr uint64_t kGiveUpDivergences = 100;
Session* g_process_session = nullptr;

const char* PartName(Part p) {
  switch (p) {
    case Part::kArena: return "allocation arena";
    case Part::kRecording: return "recording";
    case Part::kLiveView: return "live statistics";
  }
  return "?";
}

void AtExit() {
  if (g_process_session != nullptr) g_process_session->Shutdown();
}

void ChildAfterFork() {
  if (g_process_session != nullptr) g_process_session->AfterForkInChild();
}

Session* CreateProcessSession() {
  try {
    const SessionConfig cfg = ConfigFromEnv(EnvConfig::FromProcessEnvironment());
    SetLogLevel(cfg.log_level);
    for (const std::string& p : cfg.problems) KARMA_LOG(kWarn, "{}", p);
    if (cfg.mode == Mode::kOff) {
      KARMA_LOG(kInfo, "KARMA_MODE=off: every call passes through");
      return nullptr;
    }
    const CudaApi api = LoadCudaApi(RealSymbolResolver());
    auto* s = new Session(cfg, api, static_cast<int64_t>(::getpid()), RealSymbolResolver());
    g_process_session = s;
    std::atexit(&AtExit);
    pthread_atfork(nullptr, nullptr, &ChildAfterFork);
    KARMA_LOG(kInfo, "mode {}, capacity {}, traces in {}", ModeName(cfg.mode), cfg.capacity.ToString(),
              cfg.trace_dir);
    return s;
  } catch (const std::exception& e) {
    KARMA_LOG(kError, "could not start ({}); every call passes through", e.what());
  } catch (...) {
    KARMA_LOG(kError, "could not start; every call passes through");
  }
  return nullptr;
}

}  // namespace

// ---- OpScope ----

void OpScope::End(bool ok) noexcept {
  if (op_ == nullptr) return;
  if (ok && op_->end != nullptr && session_->api_.cudaEventRecord != nullptr) {
    LastErrorScope errors(session_->api_);
    const StreamKey k = op_->stream_key;
    if (session_->api_.cudaEventRecord(op_->end, k == kSyncStream ? nullptr : reinterpret_cast<cudaStream_t>(k)) !=
        cudaSuccess) {
      errors.Failed();
    }
  }
  op_->state.store(ok ? RecordedOp::kDone : RecordedOp::kFailed, std::memory_order_release);
  op_ = nullptr;
}

// ---- creation ----

Session* Session::Get() {
  if (Session* t = g_test_session.load(std::memory_order_acquire)) return t;
  static std::once_flag once;
  static Session* s = nullptr;
  std::call_once(once, [] { s = CreateProcessSession(); });
  return s != nullptr && !s->forked_child_.load(std::memory_order_relaxed) ? s : nullptr;
}

void Session::InstallForTest(Session* s) { g_test_session.store(s, std::memory_order_release); }

Session::Session(SessionConfig config, const CudaApi& api, int64_t pid, SymbolResolver late_resolver)
    : config_(std::move(config)),
      api_(api),
      late_resolver_(late_resolver),
      pid_(pid),
      arena_(api_, Arena::Options{config_.arena_segment_bytes}),
      layouts_(api_) {
  if (config_.live_view) {
    auto lv = LiveView::Create(pid_);
    if (lv.ok()) {
      live_view_ = std::move(lv).value();
      stats_ = live_view_->stats();
    } else {
      Degrade(Part::kLiveView, lv.status().message());
    }
  }
  std::strncpy(stats_->mode, ModeName(config_.mode), sizeof(stats_->mode) - 1);
  marker_mode_ = !config_.iteration_marker.empty();
  if (api_.cudaMallocManaged == nullptr) Degrade(Part::kArena, "cudaMallocManaged is not available");
  const bool records = config_.mode == Mode::kAuto || config_.mode == Mode::kRecord;
  if (records && api_.cudaFuncGetParamInfo == nullptr) {
    KARMA_LOG(kWarn, "cudaFuncGetParamInfo is not available (CUDA < 12.4): kernels are recorded without buffers");
  }
  if (config_.mode == Mode::kReplay) {
    KARMA_LOG(kWarn, "KARMA_MODE=replay: the replay executor is not part of this build; running as um");
  }
  SetState(records ? live::State::kDetecting : live::State::kUm);
  observing_.store(records, std::memory_order_relaxed);
}

const CudaApi& Session::ApiFor(CudaLib lib) {
  if (late_resolver_ == nullptr) return api_;
  std::call_once(late_once_[static_cast<int>(lib)], [&] {
#define KARMA_CUDA_API_LATE(l, name)                                                               \
  if (CudaLib::l == lib && api_.name == nullptr) {                                                 \
    api_.name = reinterpret_cast<decltype(api_.name)>(late_resolver_(CudaLib::l, #name));          \
  }
    KARMA_CUDA_API_TABLE(KARMA_CUDA_API_LATE)
#undef KARMA_CUDA_API_LATE
  });
  return api_;
}

Session::~Session() { worker_.Drain(); }

void Session::SetState(live::State s) { stats_->state.store(static_cast<uint32_t>(s), std::memory_order_relaxed); }

void Session::Degrade(Part part, const std::string& why) noexcept {
  bool expected = false;
  if (!degraded_[static_cast<int>(part)].compare_exchange_strong(expected, true)) return;
  try {
    KARMA_LOG(kWarn, "{} disabled, passing through: {}", PartName(part), why);
  } catch (...) {
  }
  if (part == Part::kRecording) {
    observing_.store(false, std::memory_order_relaxed);
    const live::State s = state();
    if (s == live::State::kDetecting || s == live::State::kRecording) SetState(live::State::kUm);
  }
}

// ---- memory ----

void Session::EnsureDeviceInfo() {
  std::call_once(device_info_once_, [this] {
    if (api_.cudaMemGetInfo == nullptr) return;
    size_t free = 0, total = 0;
    LastErrorScope errors(api_);
    if (api_.cudaMemGetInfo(&free, &total) != cudaSuccess) {
      errors.Failed();
      return;
    }
    stats_->device_total_bytes.store(total, std::memory_order_relaxed);
    stats_->budget_bytes.store(config_.capacity.Resolve(total), std::memory_order_relaxed);
  });
}

void Session::UpdateUsage() {
  const ArenaUsage u = arena_.usage();
  const uint64_t used = u.live_bytes + registry_.bytes(Origin::kDevice);
  stats_->arena_reserved_bytes.store(u.reserved_bytes, std::memory_order_relaxed);
  stats_->used_bytes.store(used, std::memory_order_relaxed);
  uint64_t peak = stats_->peak_used_bytes.load(std::memory_order_relaxed);
  while (used > peak && !stats_->peak_used_bytes.compare_exchange_weak(peak, used)) {
  }
}

uint32_t Session::CaptureSite() {
  const live::State s = state();
  return s == live::State::kDetecting || s == live::State::kRecording ? sites_.Capture() : 0;
}

Session::Served Session::AllocateDevice(uint64_t size, StreamKey stream, bool runtime_api, uint64_t* addr) {
  if (degraded(Part::kArena)) return Served::kPassThrough;
  Arena::AllocResult r;
  try {
    EnsureDeviceInfo();
    r = arena_.Allocate(size, stream, runtime_api);
  } catch (...) {
    Degrade(Part::kArena, "an internal error while allocating");
    return Served::kPassThrough;
  }
  if (r.status == Arena::AllocStatus::kOutOfMemory) return Served::kOutOfMemory;
  if (r.status == Arena::AllocStatus::kUnavailable) {
    Degrade(Part::kArena, fmt::format("cudaMallocManaged failed with CUDA error {}", static_cast<int>(r.error)));
    return Served::kPassThrough;
  }
  *addr = r.addr;
  try {
    RegisterBuffer(r.addr, size, Origin::kArena, stream);
  } catch (...) {
    Degrade(Part::kRecording, "out of memory while registering an allocation");
  }
  return Served::kServed;
}

void Session::NoteAllocation(uint64_t addr, uint64_t size, Origin origin) {
  try {
    RegisterBuffer(addr, size, origin, kSyncStream);
  } catch (...) {
    Degrade(Part::kRecording, "out of memory while registering an allocation");
  }
}

void Session::RegisterBuffer(uint64_t addr, uint64_t size, Origin origin, StreamKey stream) {
  const uint32_t site = origin == Origin::kHostPinned ? 0 : CaptureSite();
  if (origin != Origin::kHostPinned) stats_->allocations.fetch_add(1, std::memory_order_relaxed);
  if (!observing_.load(std::memory_order_relaxed)) {
    registry_.Insert(addr, size, origin, site);
  } else {
    std::lock_guard<std::mutex> lock(record_mu_);
    // The same allocation of every iteration follows the same op, after as many others, with the same size:
    // an identity for signatures that does not depend on where the allocator put the buffer.
    uint64_t birth = HashMix(HashMix(HashMix(last_op_signature_, allocs_since_op_++), size), stream);
    birth |= 1;  // never 0 ("not observing")
    const uint64_t serial = registry_.Insert(addr, size, origin, site, birth);
    if (origin != Origin::kHostPinned) {
      // Bounded: only the allocations right before the first recorded op matter.
      if (pending_allocs_.size() >= 4096) pending_allocs_.erase(pending_allocs_.begin());
      pending_allocs_.push_back(BufferEntry{addr, size, serial, origin, site, birth});
    }
  }
  UpdateUsage();
}

void Session::FlushPendingAllocsLocked() {
  if (recording_) {
    for (const BufferEntry& e : pending_allocs_) {
      recording_->Buffer(e).allocated_inside = true;
      recording_->AddEvent(trace::EventKind::kAlloc, e.serial);
    }
  }
  pending_allocs_.clear();
}

Session::Freed Session::FreeDevice(uint64_t addr, StreamKey stream) {
  BufferEntry e;
  const bool known = registry_.Erase(addr, &e);
  try {
    if (known && e.origin != Origin::kHostPinned) {
      stats_->frees.fetch_add(1, std::memory_order_relaxed);
      if (recording_active_.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(record_mu_);
        if (recording_) {
          recording_->Buffer(e).freed_inside = true;
          recording_->AddEvent(trace::EventKind::kFreeRequested, e.serial);
        }
      }
    }
  } catch (...) {
    Degrade(Part::kRecording, "out of memory while recording a free");
  }
  Arena::FreeStatus st = Arena::FreeStatus::kNotArena;
  try {
    st = arena_.Free(addr, stream);
  } catch (...) {
    // The block is lost to reuse, but it was the arena's: the real free must not see it.
    Degrade(Part::kArena, "an internal error while freeing");
    st = arena_.Contains(addr) ? Arena::FreeStatus::kFreed : Arena::FreeStatus::kNotArena;
  }
  UpdateUsage();
  if (st == Arena::FreeStatus::kFreed) return Freed::kArena;
  if (st == Arena::FreeStatus::kInvalid) return Freed::kInvalid;
  return Freed::kOther;
}

void Session::AdjustMemInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return;
  const uint64_t budget = config_.capacity.Resolve(*total);
  const uint64_t used = arena_.usage().live_bytes;
  const uint64_t left = budget > used ? budget - used : 0;
  *free = static_cast<size_t>(std::min<uint64_t>(*free, left));
}

bool Session::InArena(uint64_t addr) const { return arena_.Contains(addr); }

// ---- ops ----

bool Session::WantRecording() const {
  return (config_.mode == Mode::kAuto || config_.mode == Mode::kRecord) && !degraded(Part::kRecording) &&
         stats_->recorded_iteration.load(std::memory_order_relaxed) == 0;
}

void Session::CountOp() {
  // Only once a period is known: without one there is nothing to count against (and no atomic to pay for).
  const uint64_t p = counted_period_.load(std::memory_order_relaxed);
  if (p == 0) return;
  const uint64_t n = op_counter_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t b = counted_boundary_.load(std::memory_order_relaxed);
  if (n >= b && (n - b) % p == 0) {
    arena_.BeginIteration();
    stats_->iteration.fetch_add(1, std::memory_order_relaxed);
  }
}

uint64_t Session::ShapeSignature(const OpDesc& d) {
  uint64_t h = HashMix(kHashSeed, static_cast<uint64_t>(d.kind));
  h = HashMix(h, reinterpret_cast<uint64_t>(d.func != nullptr ? d.func : static_cast<const void*>(d.name)));
  for (uint32_t v : d.grid) h = HashMix(h, v);
  for (uint32_t v : d.block) h = HashMix(h, v);
  return HashMix(h, d.shape);
}

uint64_t Session::Signature(uint64_t shape, const std::vector<Touch>& touches) {
  uint64_t h = shape;
  // Which buffers, and where in them: two identical layers differ in the weights they read, and a caching
  // allocator's sub-allocations differ in offset. A buffer is named by its birth (where in the op sequence it
  // was allocated), not its address, so that an allocator placing an iteration's buffers differently every
  // time does not hide the period; buffers allocated before observation began are named by their address.
  for (const Touch& t : touches) {
    const BufferEntry& b = t.hit.buffer;
    h = HashMix(h, b.birth != 0 ? b.birth : b.start);
    h = HashMix(h, t.hit.value - b.start);
  }
  return h;
}

const std::string& Session::KernelName(const OpDesc& d) {
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

RecordedOp* Session::AddOpLocked(const OpDesc& d, const std::vector<Touch>& touches) {
  Recording& rec = *recording_;
  RecordedOp& op = rec.ops.emplace_back();
  op.kind = d.kind;
  op.name = d.kind == trace::OpKind::kKernel ? KernelName(d) : std::string(d.name != nullptr ? d.name : "op");
  op.stream_key = d.stream;
  op.stream = rec.StreamId(d.stream);
  op.flops = d.flops;
  op.bytes = d.bytes;
  for (const Touch& t : touches) {
    if (t.hit.buffer.origin == Origin::kHostPinned) continue;
    RecordedBuffer& rb = rec.Buffer(t.hit.buffer);
    if (t.workspace) rb.workspace = true;
    if (d.dtype != nullptr && rb.dtype.empty() && !t.workspace) rb.dtype = d.dtype;
    op.buffers.emplace_back(t.hit.buffer.serial, t.access);
  }
  if (api_.cudaEventCreateWithFlags != nullptr && api_.cudaEventRecord != nullptr) {
    LastErrorScope errors(api_);
    const cudaStream_t s = d.stream == kSyncStream ? nullptr : reinterpret_cast<cudaStream_t>(d.stream);
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
  return &op;
}

OpScope Session::BeginOp(const OpDesc& d) noexcept {
  OpScope scope;
  stats_->ops.fetch_add(1, std::memory_order_relaxed);
  if (!observing_.load(std::memory_order_relaxed) || capture_depth_.load(std::memory_order_relaxed) > 0) {
    CountOp();
    return scope;
  }
  try {
    thread_local std::vector<PointerHit> hits;
    thread_local std::vector<Touch> touches;
    hits.clear();
    touches.clear();
    std::lock_guard<std::mutex> lock(record_mu_);
    if (marker_mode_ && !recording_) {
      pending_allocs_.clear();
      return scope;
    }
    {
      Registry::Reader reader(registry_);
      if (d.kind == trace::OpKind::kKernel) {
        const ParamLayout& layout = d.driver ? layouts_.ForDriver(static_cast<CUfunction>(const_cast<void*>(d.func)))
                                             : layouts_.ForRuntime(d.func);
        ScanKernelArgs(layout, d.args, reader, &hits);
        const void* buf = nullptr;
        size_t size = 0;
        if (FindExtraBuffer(d.extra, &buf, &size)) ScanArgBuffer(buf, size, reader, &hits);
        for (const PointerHit& h : hits) touches.push_back(Touch{h, Access::kTouch, false});
      } else {
        for (const Operand& o : d.operands) {
          const BufferEntry* e = o.ptr != 0 ? reader.Find(o.ptr) : nullptr;
          if (e != nullptr) touches.push_back(Touch{PointerHit{o.ptr, *e}, o.access, o.workspace});
        }
      }
    }
    if (!marker_mode_) {
      const uint64_t live = arena_.usage().live_bytes + registry_.bytes(Origin::kDevice);
      const uint64_t shape = ShapeSignature(d);
      // Births name buffers by the shape of the op they follow, not its full signature: that one names
      // buffers by their births, and the chain would never repeat.
      last_op_signature_ = shape;
      allocs_since_op_ = 0;
      const auto step = detector_.Observe(Signature(shape, touches), live, sync_since_op_.exchange(false));
      if ((!detector_.locked() && detector_.ops() > kGiveUpOps) || detector_.divergences() > kGiveUpDivergences) {
        Degrade(Part::kRecording, fmt::format("no stable iteration after {} operations; mark iterations with "
                                              "KARMA_ITERATION_MARKER or karma_iteration_begin()",
                                              detector_.ops()));
        return scope;
      }
      switch (step) {
        case IterationDetector::Step::kLocked:
          stats_->period_ops.store(detector_.period(), std::memory_order_relaxed);
          break;
        case IterationDetector::Step::kBoundary:
          stats_->period_ops.store(detector_.period(), std::memory_order_relaxed);
          OnBoundaryLocked();
          break;
        case IterationDetector::Step::kDiverged:
          stats_->divergences.fetch_add(1, std::memory_order_relaxed);
          if (recording_) AbortRecordingLocked("the iteration diverged from the previous one");
          break;
        default:
          break;
      }
    }
    FlushPendingAllocsLocked();
    if (recording_) {
      scope.op_ = AddOpLocked(d, touches);
      scope.rec_ = recording_;
      scope.session_ = this;
    }
  } catch (...) {
    Degrade(Part::kRecording, "an internal error while observing an operation");
  }
  return scope;
}

void Session::OnBoundaryLocked() {
  arena_.BeginIteration();
  stats_->iteration.fetch_add(1, std::memory_order_relaxed);
  if (recording_) {
    FinishRecordingLocked();
  } else if (WantRecording() && (marker_mode_ || detector_.stable())) {
    StartRecordingLocked(marker_mode_);
  }
}

void Session::StartRecordingLocked(bool by_marker) {
  auto rec = std::make_shared<Recording>();
  rec->iteration = stats_->iteration.load(std::memory_order_relaxed);
  rec->by_marker = by_marker;
  if (api_.cudaGetDevice != nullptr) {
    LastErrorScope errors(api_);
    if (api_.cudaGetDevice(&rec->device) != cudaSuccess) errors.Failed();
  }
  recording_ = std::move(rec);
  recording_active_.store(true, std::memory_order_release);
  SetState(live::State::kRecording);
  KARMA_LOG(kInfo, "recording iteration {}{}", recording_->iteration,
            by_marker ? " (marked)" : fmt::format(" ({} ops per iteration)", detector_.period()));
}

void Session::FinishRecordingLocked() {
  std::shared_ptr<Recording> rec = std::move(recording_);
  recording_.reset();
  recording_active_.store(false, std::memory_order_release);
  stats_->recorded_iteration.store(std::max<uint64_t>(rec->iteration, 1), std::memory_order_relaxed);
  SetState(live::State::kRecorded);
  observing_.store(false, std::memory_order_relaxed);
  if (!marker_mode_) {
    // From here on iterations are counted by period; the current op starts one.
    const uint64_t n = detector_.ops();
    op_counter_.store(n, std::memory_order_relaxed);
    counted_boundary_.store(n - 1 + detector_.period(), std::memory_order_relaxed);
    counted_period_.store(detector_.period(), std::memory_order_relaxed);
  }
  if (!worker_.Post([this, rec] { WriteTrace(rec); })) WriteTrace(rec);
}

void Session::AbortRecordingLocked(const char* why) {
  std::shared_ptr<Recording> rec = std::move(recording_);
  recording_.reset();
  recording_active_.store(false, std::memory_order_release);
  SetState(live::State::kDetecting);
  KARMA_LOG(kInfo, "recording of iteration {} abandoned: {}", rec->iteration, why);
  auto release = [this, rec] {
    const TraceContext ctx;
    (void)FinishRecording(*rec, api_, ctx);  // waits for in-flight ops and releases every event
  };
  if (!worker_.Post(release)) release();
}

void Session::WriteTrace(const std::shared_ptr<Recording>& rec) {
  try {
    if (api_.cudaSetDevice != nullptr) {
      LastErrorScope errors(api_);
      if (api_.cudaSetDevice(rec->device) != cudaSuccess) errors.Failed();
    }
    TraceContext ctx;
    ctx.model = program_invocation_short_name;
    ctx.source = fmt::format("libkarma {} recording of iteration {} ({}), pid {}", ModeName(config_.mode),
                             rec->iteration, rec->by_marker ? "marked" : "detected", pid_);
    ctx.sites = &sites_;
    auto it = FinishRecording(*rec, api_, ctx);
    Status st = it.status();
    std::string path;
    if (st.ok()) {
      auto p = TracePath(config_.trace_dir, program_invocation_short_name, pid_);
      st = p.status();
      if (st.ok()) {
        path = *p;
        st = trace::WriteKtraceFile(*it, path);
      }
    }
    std::lock_guard<std::mutex> lock(trace_mu_);
    if (st.ok()) {
      trace_path_ = path;
      KARMA_LOG(kInfo, "recorded iteration {} ({} ops, {} buffers) to {}", rec->iteration, it->ops.size(),
                it->buffers.size(), path);
    } else {
      trace_error_ = st.message();
      KARMA_LOG(kWarn, "the recorded iteration could not be written: {}", st.message());
    }
  } catch (...) {
    KARMA_LOG(kWarn, "the recorded iteration could not be written (internal error)");
  }
}

void Session::OnSync() noexcept {
  sync_since_op_.store(true, std::memory_order_relaxed);
  if (!recording_active_.load(std::memory_order_acquire)) return;
  try {
    std::lock_guard<std::mutex> lock(record_mu_);
    if (recording_) recording_->AddEvent(trace::EventKind::kSync, 0);
  } catch (...) {
    Degrade(Part::kRecording, "out of memory while recording a synchronization");
  }
}

void Session::OnIterationMarker() noexcept {
  try {
    std::lock_guard<std::mutex> lock(record_mu_);
    if (!marker_mode_) {
      marker_mode_ = true;
      if (recording_) AbortRecordingLocked("explicit iteration markers replace automatic detection");
      if (state() == live::State::kRecording) SetState(live::State::kDetecting);
    }
    markers_++;
    arena_.BeginIteration();
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
    Degrade(Part::kRecording, "an internal error at an iteration marker");
  }
}

void Session::OnRangePush(const char* name) noexcept {
  if (name == nullptr || config_.iteration_marker.empty()) return;
  if (config_.iteration_marker == name) OnIterationMarker();
}

void Session::OnCaptureBegin() noexcept {
  if (capture_depth_.fetch_add(1) == 0) arena_.SetCapturing(true);
  if (observing_.load(std::memory_order_relaxed)) {
    {
      std::lock_guard<std::mutex> lock(record_mu_);
      if (recording_) AbortRecordingLocked("CUDA graph capture");
    }
    Degrade(Part::kRecording, "CUDA graph capture: launches replayed from graphs cannot be observed");
  }
}

void Session::OnCaptureEnd() noexcept {
  int depth = capture_depth_.load();
  while (depth > 0 && !capture_depth_.compare_exchange_weak(depth, depth - 1)) {
  }
  if (depth == 1) arena_.SetCapturing(false);
}

// ---- lifecycle ----

void Session::WaitForWorker() {
  worker_.Drain();
}

std::string Session::trace_path() const {
  std::lock_guard<std::mutex> lock(trace_mu_);
  return trace_path_;
}

std::string Session::SummaryLine() const {
  const live::Stats& s = *stats_;
  auto get = [](const live::Counter& c) { return c.load(std::memory_order_relaxed); };
  const uint64_t iterations = get(s.iteration);
  std::string line = fmt::format("mode {}, {} iteration{}", config_.mode == Mode::kReplay ? "um" : ModeName(config_.mode),
                                 iterations, iterations == 1 ? "" : "s");
  if (get(s.period_ops) != 0) line += fmt::format(" ({} ops each)", get(s.period_ops));
  line += fmt::format(", peak {} allocated vs {} budget", FormatBytes(get(s.peak_used_bytes)),
                      FormatBytes(get(s.budget_bytes)));
  if (get(s.device_total_bytes) != 0) line += fmt::format(" (device {})", FormatBytes(get(s.device_total_bytes)));
  line += fmt::format("; prefetched {}, evicted {}, discarded {}, recomputed {} kernels",
                      FormatBytes(get(s.prefetched_bytes)), FormatBytes(get(s.evicted_bytes)),
                      FormatBytes(get(s.discarded_bytes)), get(s.recomputed_kernels));
  if (get(s.measures_stalls) != 0) {
    const uint64_t busy = get(s.busy_ns);
    line += fmt::format("; faults {}, stalls {:.1f}%", get(s.faults),
                        busy == 0 ? 0.0 : 100.0 * static_cast<double>(get(s.stall_ns)) / static_cast<double>(busy));
  } else {
    line += "; faults and stalls not measured (no plan replayed)";
  }
  std::lock_guard<std::mutex> lock(trace_mu_);
  if (!trace_path_.empty()) {
    line += "; trace " + trace_path_;
  } else if (!trace_error_.empty()) {
    line += "; trace not written: " + trace_error_;
  } else if (config_.mode == Mode::kAuto || config_.mode == Mode::kRecord) {
    line += "; no iteration recorded";
  }
  return line;
}

void Session::Shutdown() noexcept {
  if (shut_down_.exchange(true) || forked_child_.load()) return;
  try {
    {
      std::lock_guard<std::mutex> lock(record_mu_);
      // An iteration that ran to its end but was never followed by another op is complete.
      if (recording_ && !marker_mode_ && detector_.period() != 0 && recording_->ops.size() >= detector_.period()) {
        FinishRecordingLocked();
      } else if (recording_) {
        AbortRecordingLocked("the process exited during the recorded iteration");
      }
    }
    worker_.Drain();
    if (GetLogLevel() >= LogLevel::kWarn) LogMessage(LogLevel::kInfo, SummaryLine());
  } catch (...) {
  }
  if (live_view_ != nullptr) live_view_->Unlink();
}

void Session::AfterForkInChild() noexcept {
  forked_child_.store(true);
  worker_.AbandonAfterFork();
}

}  // namespace karma::rt
