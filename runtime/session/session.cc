// The session: lazy start, memory, the ops' way to the observer and the executor, degradation, statistics and
// shutdown.
#include "runtime/session/session.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "ground/common/log.h"
#include "runtime/observe/relaunch.h"

namespace karma::rt {
namespace {

std::atomic<Session*> g_test_session{nullptr};
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
    if (const std::string& note = AllocatorsAtLoad().note; !note.empty()) KARMA_LOG(kInfo, "{}", note);
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
  if (position_ != Executor::kNoPosition) {
    session_->executor_.After(position_, ok);
    position_ = Executor::kNoPosition;
  }
  if (op_ == nullptr) return;
  session_->observer_.EndOp(*rec_, *op_, ok);
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
      memory_(config_, api_, executor_, [this]() -> const CudaApi& { return ApiFor(CudaLib::kDriver); }),
      executor_(api_, &local_stats_),
      data_parallel_(api_, executor_),
      observer_(config_, api_, worker_, this),
      plan_(config_, api_, executor_, worker_, observer_, memory_, data_parallel_) {
  if (config_.live_view) {
    auto lv = LiveView::Create(pid_);
    if (lv.ok()) {
      live_view_ = std::move(lv).value();
      stats_ = live_view_->stats();
    } else {
      Degrade(Part::kLiveView, lv.status().message());
    }
  }
  executor_.SetStats(stats_);
  memory_.SetStats(stats_);
  observer_.SetStats(stats_);
  plan_.SetStats(stats_);
  executor_.SetBatchMoves(config_.batch_moves);
  executor_.SetMoveThreads(config_.move_threads);
  std::strncpy(stats_->mode, ModeName(config_.mode), sizeof(stats_->mode) - 1);
  if (api_.cudaMallocManaged == nullptr) Degrade(Part::kArena, "cudaMallocManaged is not available");
  // replay records too: the plan file names positions and buffers of an iteration, which must be found again.
  const bool records = config_.mode == Mode::kAuto || config_.mode == Mode::kRecord || config_.mode == Mode::kReplay;
  if (records && api_.cudaFuncGetParamInfo == nullptr) {
    KARMA_LOG(kWarn, "cudaFuncGetParamInfo is not available (CUDA < 12.4): kernels are recorded without buffers");
  }
  SetState(records ? live::State::kDetecting : live::State::kUm);
  observer_.SetActive(records);
  // Managed memory only: DeviceMemory leaves the copy path out where the shim is (the host cannot reach its memory).
  data_parallel_.Install();
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

Session::~Session() {
  plan_.StopPlanning();
  worker_.Drain();
}

void Session::SetState(live::State s) { stats_->state.store(static_cast<uint32_t>(s), std::memory_order_relaxed); }

void Session::Degrade(Part part, const std::string& why) noexcept {
  bool expected = false;
  if (!degraded_[static_cast<int>(part)].compare_exchange_strong(expected, true)) return;
  try {
    KARMA_LOG(kWarn, "{} disabled, passing through: {}", PartName(part), why);
  } catch (...) {
  }
  if (part == Part::kRecording) {
    observer_.SetActive(false);
    const live::State s = state();
    if (s == live::State::kDetecting || s == live::State::kRecording) SetState(live::State::kUm);
  }
}

// ---- memory ----

void Session::UpdateUsage() {
  const ArenaUsage u = memory_.arena().usage();
  const uint64_t used = u.live_bytes + observer_.registry().bytes(Origin::kDevice);
  stats_->arena_reserved_bytes.store(u.reserved_bytes, std::memory_order_relaxed);
  stats_->used_bytes.store(used, std::memory_order_relaxed);
  observer_.NoteUsed(used);
  live::RaiseTo(stats_->peak_used_bytes, used);
}

Session::Served Session::AllocateDevice(uint64_t size, StreamKey stream, bool runtime_api, uint64_t* addr) {
  if (degraded(Part::kArena)) return Served::kPassThrough;
  Arena::AllocResult r;
  try {
    memory_.EnsureDeviceInfo();
    if (!memory_.copy_refused().empty()) {
      // Nothing of KARMA's then: no plan either, whose managed-memory moves and scratch would need the arena.
      Degrade(Part::kArena, memory_.copy_refused() + "; no managed memory instead");
      Degrade(Part::kRecording, memory_.copy_refused());
      return Served::kPassThrough;
    }
    r = memory_.arena().Allocate(size, stream, runtime_api);
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
  // The bytes an allocation adds to what the application holds on the device (the arena's in whole spans).
  const uint64_t bytes = origin == Origin::kArena ? Arena::SpanOf(size) : origin == Origin::kDevice ? size : 0;
  observer_.RegisterBuffer(addr, size, origin, stream, bytes);
  CopyResidency* residency = memory_.residency();
  if (residency != nullptr && origin == Origin::kArena) {
    // A small block gets device memory only where it has its slab's page to itself (no neighbour in use there).
    uint64_t at = addr, span = Arena::SpanOf(size);
    const uint64_t g = residency->granularity();
    if (span < g) {
      at = memory_.arena().SolePage(addr, g);
      span = at != 0 ? g : 0;
    }
    if (span != 0) executor_.ResidencyOnAllocation(at, span, stream);
  }
  if (origin != Origin::kHostPinned && executor_.armed()) {
    executor_.OnAllocation(addr, size, observer_.counter().ops(), stream, origin == Origin::kArena);
  }
  UpdateUsage();
}

Session::Freed Session::FreeDevice(uint64_t addr, StreamKey stream) {
  BufferEntry e;
  const bool known = observer_.ForgetBuffer(addr, &e);
  Arena& arena = memory_.arena();
  if (known && e.origin != Origin::kHostPinned && executor_.armed()) {
    std::vector<std::pair<uint64_t, uint64_t>> slab_pages;
    try {
      if (e.origin == Origin::kArena) slab_pages = arena.SlabPagesFreedBy(addr, stream);
    } catch (...) {
      slab_pages.clear();  // out of memory: the pages stay until reuse, as without a plan
    }
    executor_.OnFree(addr, e.origin == Origin::kArena ? Arena::SpanOf(e.size) : 0, stream, e.origin == Origin::kArena,
                     slab_pages);
  }
  if (CopyResidency* residency = memory_.residency(); known && residency != nullptr && e.origin == Origin::kArena) {
    std::vector<std::pair<uint64_t, uint64_t>> slabs;
    try {
      slabs = arena.SlabPagesFreedBy(addr, stream, residency->granularity());  // slabs left empty
    } catch (...) {
      slabs.clear();
    }
    executor_.ResidencyOnFree(addr, Arena::SpanOf(e.size), stream, slabs);
  }
  Arena::FreeStatus st = Arena::FreeStatus::kNotArena;
  try {
    st = arena.Free(addr, stream);
  } catch (...) {
    // The block is lost to reuse, but it was the arena's: the real free must not see it.
    Degrade(Part::kArena, "an internal error while freeing");
    st = arena.Contains(addr) ? Arena::FreeStatus::kFreed : Arena::FreeStatus::kNotArena;
  }
  UpdateUsage();
  if (st == Arena::FreeStatus::kFreed) return Freed::kArena;
  if (st == Arena::FreeStatus::kInvalid) return Freed::kInvalid;
  return Freed::kOther;
}

void Session::AdjustMemInfo(size_t* free, size_t* total) { memory_.AdjustMemInfo(free, total); }

bool Session::ArenaPointerAttributes(uint64_t addr, cudaPointerAttributes* attributes) const {
  if (!memory_.arena().Contains(addr)) return false;
  *attributes = cudaPointerAttributes{};
  attributes->type = cudaMemoryTypeDevice;
  attributes->device = memory_.device();
  attributes->devicePointer = reinterpret_cast<void*>(addr);
  return true;
}

// ---- ops ----

OpScope Session::BeginOp(const OpDesc& d) noexcept {
  OpScope scope;
  stats_->ops.fetch_add(1, std::memory_order_relaxed);
  if (!observer_.observing()) {
    const uint64_t n = observer_.CountOp();
    // Launches captured into a graph run later, unseen: nothing is replayed around them.
    if (n != Observer::kNoIndex && executor_.armed() && !observer_.capturing()) {
      bool wants_launch = false;
      scope.position_ = executor_.Before(n, Observer::ShapeSignature(d), d.stream, &wants_launch);
      if (scope.position_ != Executor::kNoPosition) scope.session_ = this;
      if (wants_launch) KeepLaunch(d, scope.position_);
      HandleExecutorRequest();
    }
    SettleOperands(d);
    return scope;
  }
  SettleOperands(d);
  Observer::Observed o = observer_.Observe(d);
  if (o.op != nullptr) {
    scope.op_ = o.op;
    scope.rec_ = std::move(o.rec);
    scope.session_ = this;
  }
  return scope;
}

void Session::SettleOperands(const OpDesc& d) noexcept {
  CopyResidency* residency = memory_.residency();
  if (residency == nullptr || (d.kind != trace::OpKind::kCopy && d.kind != trace::OpKind::kMemset)) return;
  try {
    for (const Operand& o : d.operands) residency->AwaitSettled({o.ptr, std::max<uint64_t>(o.bytes, 1)});
  } catch (...) {
  }
}

void Session::KeepLaunch(const OpDesc& d, uint32_t position) {
  try {
    Relaunch launch;
    if (d.kind == trace::OpKind::kKernel) {
      launch = MakeKernelRelaunch(d, observer_.LayoutOf(d));
    } else if (d.relaunch) {
      launch = std::make_shared<const std::function<bool(const AddressMap&)>>(d.relaunch);
    }
    executor_.SetLaunch(position, std::move(launch));
  } catch (...) {
  }
}

void Session::HandleExecutorRequest() {
  try {
    if (executor_.TakeLinkMeasured()) plan_.OnLinkMeasured();
    if (plan_.trial_ready()) plan_.CheckPlanTrial();
  } catch (...) {
    KARMA_LOG(kWarn, "the measured link rates were not acted on (internal error)");
  }
  const Executor::Request r = executor_.TakeRequest();
  if (r == Executor::Request::kNone) return;
  try {
    if (r == Executor::Request::kReplan) {
      plan_.PostReplan();
    } else {
      const uint64_t diverged = executor_.diverged_period();
      executor_.Uninstall();
      observer_.RestartRecording(diverged);
    }
  } catch (...) {
    Degrade(Part::kRecording, "an internal error while planning again");
  }
}

void Session::OnSync() noexcept { observer_.OnSync(); }

void Session::OnIterationMarker() noexcept { observer_.OnIterationMarker(); }

void Session::OnRangePush(const char* name) noexcept {
  if (name == nullptr || config_.iteration_marker.empty()) return;
  if (config_.iteration_marker == name) OnIterationMarker();
}

void Session::OnCaptureBegin() noexcept {
  if (observer_.EnterCapture()) memory_.arena().SetCapturing(true);
  observer_.AbandonForCapture();
}

void Session::OnCaptureEnd() noexcept {
  if (observer_.LeaveCapture()) memory_.arena().SetCapturing(false);
}

// ---- what the observer asks of the layers above it ----

void Session::BeginIteration() { memory_.arena().BeginIteration(); }

uint64_t Session::ArenaLiveBytes() { return memory_.arena().usage().live_bytes; }

bool Session::PrefetchOperandsLocked(const OpDesc& d, const std::vector<Touch>& touches, int device) {
  if (CopyResidency* residency = memory_.residency(); residency != nullptr) {
    // Nothing pages on demand: what is beyond the budget stays in host memory (read there, slowly) until a plan.
    const uint64_t g = residency->granularity();
    for (const Touch& t : touches) {
      if (!Movable(t.buffer.origin) || t.buffer.size == 0 || !memory_.arena().Contains(t.buffer.start)) continue;
      const uint64_t lo = AlignDown(t.buffer.start, g), hi = AlignUp(t.buffer.start + t.buffer.size, g);
      if (!residency->Resident({lo, hi - lo})) return false;
    }
    return true;
  }
  if (api_.cudaMemPrefetchAsync == nullptr) return true;
  const cudaStream_t s = StreamOf(d.stream);
  LastErrorScope errors(api_);
  for (const Touch& t : touches) {
    if (!Movable(t.buffer.origin) || t.buffer.size == 0) continue;
    cudaMemLocation loc{};
    loc.type = cudaMemLocationTypeDevice;
    loc.id = device;
    if (api_.cudaMemPrefetchAsync(reinterpret_cast<const void*>(t.buffer.start), t.buffer.size, loc, 0, s) !=
        cudaSuccess) {
      errors.Failed();
    }
  }
  return true;
}

void Session::OnMarker(uint64_t op) {
  if (executor_.armed()) executor_.OnMarker(op);
}

void Session::RecordingFinished(std::shared_ptr<Recording> rec) {
  if (!worker_.Post([this, rec] { plan_.WriteTrace(rec, pid_); })) plan_.WriteTrace(rec, pid_);
}

// ---- lifecycle ----

void Session::WaitForWorker() {
  worker_.Drain();
}

std::string Session::trace_path() const { return plan_.trace_path(); }

std::string Session::plan_path() const { return plan_.plan_path(); }

std::shared_ptr<const RecordedIteration> Session::recorded() const { return plan_.recorded(); }

std::string Session::SummaryLine() const {
  const live::Stats& s = *stats_;
  auto get = [](const live::Counter& c) { return c.load(std::memory_order_relaxed); };
  const uint64_t iterations = get(s.iteration);
  std::string line = fmt::format("mode {}, {} iteration{}", ModeName(config_.mode), iterations,
                                 iterations == 1 ? "" : "s");
  if (get(s.period_ops) != 0) line += fmt::format(" ({} ops each)", get(s.period_ops));
  line += fmt::format(", peak {} allocated", FormatBytes(get(s.peak_used_bytes)));
  if (const CopyResidency* residency = memory_.residency(); residency != nullptr) {
    const CopyResidency::CallTally& vmm = residency->vmm_calls();
    line += fmt::format(", copy path: device pool at most {} ({} fetches or makes found no room and left their pages in "
                        "host memory; {} virtual memory calls held their threads {:.2f} ms of wall clock)",
                        FormatBytes(residency->peak_device_bytes()), residency->stranded(),
                        vmm.calls.load(std::memory_order_relaxed), vmm.ns.load(std::memory_order_relaxed) / 1e6);
  }
  if (const uint64_t peak = executor_.peak_device_bytes(); peak != 0) {
    // cudaMemGetInfo counts the CUDA context and what the libraries hold: what was in use before the first
    // allocation is set apart.
    const uint64_t baseline = std::min(peak, memory_.baseline_bytes());
    line += fmt::format(", {} on the device", FormatBytes(peak - baseline));
    if (baseline != 0) line += fmt::format(" (+{} in use before the first allocation)", FormatBytes(baseline));
    // In steady replay: the most in use, and the plan's own bytes against what cudaMemGetInfo showed beside them.
    if (const Executor::Residency r = executor_.steady_residency(); r.iterations != 0) {
      const auto base = static_cast<int64_t>(baseline);
      line += fmt::format(", {} in steady replay (the plan's bytes {} to {}, the most before op {}, over {} "
                          "iterations)", FormatBytes(r.peak > baseline ? r.peak - baseline : 0),
                          FormatSignedBytes(r.above_min - base), FormatSignedBytes(r.above_max - base),
                          r.above_max_at, r.iterations);
    }
  }
  line += fmt::format(" vs {} budget", FormatBytes(get(s.budget_bytes)));
  if (get(s.device_total_bytes) != 0) line += fmt::format(" (device {})", FormatBytes(get(s.device_total_bytes)));
  line += fmt::format("; prefetched {}, evicted {}, discarded {}, recomputed {} kernels",
                      FormatBytes(get(s.prefetched_bytes)), FormatBytes(get(s.evicted_bytes)),
                      FormatBytes(get(s.discarded_bytes)), get(s.recomputed_kernels));
  if (get(s.measures_stalls) != 0) {
    const uint64_t busy = get(s.busy_ns);
    line += fmt::format("; faults {} (reads of data KARMA moved away), prefetches on time {}/{}, stalls {:.1f}% of "
                        "replayed time", get(s.faults), get(s.prefetch_hits),
                        get(s.prefetch_hits) + get(s.prefetch_misses),
                        busy == 0 ? 0.0 : 100.0 * static_cast<double>(get(s.stall_ns)) / static_cast<double>(busy));
    if (get(s.divergences) != 0) line += fmt::format(", {} divergences", get(s.divergences));
    if (const uint64_t replayed = get(s.replayed_iterations); replayed != 0) {
      line += fmt::format("; managed-memory calls held the application {:.2f} ms of wall clock per replayed iteration",
                          static_cast<double>(get(s.app_move_ns)) / 1e6 / static_cast<double>(replayed));
      if (config_.move_threads) {
        line += fmt::format(" (the move threads {:.2f} ms)",
                            static_cast<double>(get(s.mover_move_ns)) / 1e6 / static_cast<double>(replayed));
      }
    }
  } else {
    line += "; faults and stalls not measured (no plan replayed)";
  }
  line += plan_.OutcomeLine();
  return line;
}

void Session::Shutdown() noexcept {
  if (shut_down_.exchange(true) || forked_child_.load()) return;
  try {
    data_parallel_.Uninstall();
    observer_.EndRecordingAtExit();
    plan_.StopPlanning();
    worker_.Drain();
    executor_.Flush();
    if (GetLogLevel() >= LogLevel::kWarn) LogMessage(LogLevel::kInfo, SummaryLine());
    if (const std::string calls = executor_.CallsLine(); !calls.empty()) KARMA_LOG(kInfo, "{}", calls);
  } catch (...) {
  }
  if (live_view_ != nullptr) live_view_->Unlink();
}

void Session::AfterForkInChild() noexcept {
  forked_child_.store(true);
  worker_.AbandonAfterFork();
  executor_.AbandonAfterFork();
}

}  // namespace karma::rt
