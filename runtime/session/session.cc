// The session: lazy start, memory, op observation, recording life cycle, statistics and shutdown.
#include "runtime/session/session.h"

#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ground/common/log.h"
#include "ground/common/wall_time.h"
#include "runtime/plan/planning.h"
#include "runtime/observe/relaunch.h"
#include "policy/plan_io.h"
#include "ground/trace/ktrace_io.h"

namespace karma::rt {
namespace {

std::atomic<Session*> g_test_session{nullptr};
// Ops observed without finding an iteration before detection gives up (its cost is per op).
constexpr uint64_t kGiveUpOps = 2'000'000;
constexpr uint64_t kGiveUpDivergences = 100;
// Iterations the detector by shapes must have held its period, with the one by buffers and offsets locked on
// none, before it is used instead.
constexpr uint64_t kShapeFallbackBoundaries = 4;
// A plan made for the measured link is judged on this many timed iterations, and given up for the plan it
// replaced when their median is more than kTrialSlower times that plan's.
constexpr uint32_t kTrialIterations = 3;
constexpr double kTrialSlower = 1.02;
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
  if (ok && op_->end != nullptr && session_->api_.cudaEventRecord != nullptr) {
    LastErrorScope errors(session_->api_);
    const StreamKey k = op_->stream_key;
    if (session_->api_.cudaEventRecord(op_->end, StreamOf(k)) != cudaSuccess) {
      errors.Failed();
    }
  }
  if (ok && !op_->probes.empty()) {
    try {
      session_->probes_.After(*rec_, *op_);
    } catch (...) {
      op_->probes.clear();
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
      executor_(api_, &local_stats_),
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
  executor_.SetStats(stats_);
  executor_.SetBatchMoves(config_.batch_moves);
  executor_.SetMoveThreads(config_.move_threads);
  std::strncpy(stats_->mode, ModeName(config_.mode), sizeof(stats_->mode) - 1);
  marker_mode_ = !config_.iteration_marker.empty();
  if (api_.cudaMallocManaged == nullptr) Degrade(Part::kArena, "cudaMallocManaged is not available");
  // replay records too: the plan file names positions and buffers of an iteration, which must be found again.
  const bool records = config_.mode == Mode::kAuto || config_.mode == Mode::kRecord || config_.mode == Mode::kReplay;
  if (records && api_.cudaFuncGetParamInfo == nullptr) {
    KARMA_LOG(kWarn, "cudaFuncGetParamInfo is not available (CUDA < 12.4): kernels are recorded without buffers");
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

Session::~Session() {
  stop_planning_.store(true);
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
    observing_.store(false, std::memory_order_relaxed);
    const live::State s = state();
    if (s == live::State::kDetecting || s == live::State::kRecording) SetState(live::State::kUm);
  }
}

// ---- memory ----

void Session::EnsureDeviceInfo() {
  std::call_once(device_info_once_, [this] {
    size_t free = 0, total = 0;
    if (!RealMemGetInfo(api_, &free, &total)) return;
    device_baseline_bytes_.store(total > free ? total - free : 0, std::memory_order_relaxed);
    stats_->device_total_bytes.store(total, std::memory_order_relaxed);
    const uint64_t budget = config_.capacity.Resolve(total, free);
    stats_->budget_bytes.store(budget, std::memory_order_relaxed);
    ChooseResidency(budget);
    if (budget > free) {
      KARMA_LOG(kWarn,
                "KARMA_CAPACITY {} is more than the {} free on the device ({} of {} held already, by this process's "
                "context and any other process): the driver will evict beyond the plan",
                FormatBytes(budget), FormatBytes(free), FormatBytes(total - std::min<uint64_t>(free, total)),
                FormatBytes(total));
    } else if (config_.capacity.is_fraction && free + total / 10 < total) {
      KARMA_LOG(kInfo, "budget {}: {} of the {} free on the device ({} in all)", FormatBytes(budget),
                config_.capacity.ToString(), FormatBytes(free), FormatBytes(total));
    }
  });
}

void Session::ChooseResidency(uint64_t budget) {
  if (config_.residency == ResidencyChoice::kManaged || config_.mode == Mode::kUm) return;
  int device = 0;
  if (api_.cudaGetDevice != nullptr) api_.cudaGetDevice(&device);
  auto r = CopyResidency::Create(ApiFor(CudaLib::kDriver), device, budget);
  if (!r.ok()) {
    if (config_.residency == ResidencyChoice::kCopy) {
      KARMA_LOG(kWarn, "KARMA_RESIDENCY=copy: not available here ({}); moving managed memory", r.status().message());
    } else {
      KARMA_LOG(kInfo, "KARMA_RESIDENCY=auto: managed memory ({})", r.status().message());
    }
    return;
  }
  residency_ = std::move(r).value();
  CopyResidency* res = residency_.get();
  arena_.SetSegmentSource([res](uint64_t bytes) -> uint64_t {
    auto at = res->Reserve(bytes, /*on_device=*/false);  // blocks get device memory as they are allocated
    return at.ok() ? *at : 0;
  });
  arena_.SetPreference([res](uint64_t addr, uint64_t bytes) {
    const uint64_t g = res->granularity(), lo = addr / g * g;
    return res->Backed({lo, (addr + bytes + g - 1) / g * g - lo});
  });
  executor_.SetResidency(res);
  KARMA_LOG(kInfo, "residency: copy (device memory through the virtual memory API, a pool of at most {}, pinned host "
            "chunks for what is away)", FormatBytes(AlignDown(budget, res->granularity())));
}

void Session::UpdateUsage() {
  const ArenaUsage u = arena_.usage();
  const uint64_t used = u.live_bytes + registry_.bytes(Origin::kDevice);
  stats_->arena_reserved_bytes.store(u.reserved_bytes, std::memory_order_relaxed);
  stats_->used_bytes.store(used, std::memory_order_relaxed);
  if (recording_active_.load(std::memory_order_relaxed)) live::RaiseTo(recording_held_peak_, used);
  live::RaiseTo(stats_->peak_used_bytes, used);
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
    // an identity for signatures that does not depend on where the allocator put the buffer. Identical layers
    // allocate after identical ops, so buffers of one group that are alive together (every layer's weights,
    // every layer's saved activations) are told apart by how many of the group were alive before: otherwise
    // one layer's ops would look like the whole iteration.
    const uint64_t group = HashMix(HashMix(HashMix(last_op_signature_, allocs_since_op_++), size), stream);
    if (origin == Origin::kArena) bytes_since_op_ += Arena::SpanOf(size);
    if (origin == Origin::kDevice) bytes_since_op_ += size;
    const uint64_t alive = live_births_[group]++;
    const uint64_t birth = HashMix(group, alive) | 1;  // never 0 ("not observing")
    const uint64_t serial = registry_.Insert(addr, size, origin, site, birth, group);
    if (origin != Origin::kHostPinned) {
      // Bounded: only the allocations right before the first recorded op matter.
      if (pending_allocs_.size() >= 4096) pending_allocs_.erase(pending_allocs_.begin());
      pending_allocs_.push_back(BufferEntry{addr, size, serial, origin, site, birth});
    }
  }
  if (residency_ != nullptr && origin == Origin::kArena) {
    // A small block gets device memory only where it has its slab's page to itself (no neighbour in use there).
    uint64_t at = addr, span = Arena::SpanOf(size);
    const uint64_t g = residency_->granularity();
    if (span < g) {
      at = arena_.SolePage(addr, g);
      span = at != 0 ? g : 0;
    }
    if (span != 0) executor_.ResidencyOnAllocation(at, span, stream);
  }
  if (origin != Origin::kHostPinned && executor_.armed()) {
    executor_.OnAllocation(addr, size, op_counter_.load(std::memory_order_relaxed), stream, origin == Origin::kArena);
  }
  UpdateUsage();
}

void Session::FlushPendingAllocsLocked() {
  if (recording_) {
    for (const BufferEntry& e : pending_allocs_) {
      RecordedBuffer& b = recording_->Buffer(e);
      b.allocated_inside = true;
      b.alloc_ordinal = recording_->allocations++;
      recording_->AddEvent(trace::EventKind::kAlloc, e.serial);
    }
  }
  pending_allocs_.clear();
}

Session::Freed Session::FreeDevice(uint64_t addr, StreamKey stream) {
  BufferEntry e;
  const bool known = registry_.Erase(addr, &e);
  try {
    if (known && e.birth != 0 && observing_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(record_mu_);
      auto it = live_births_.find(e.birth_group);
      if (it != live_births_.end() && --it->second == 0) live_births_.erase(it);
    }
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
  if (known && e.origin != Origin::kHostPinned && executor_.armed()) {
    std::vector<std::pair<uint64_t, uint64_t>> slab_pages;
    try {
      if (e.origin == Origin::kArena) slab_pages = arena_.SlabPagesFreedBy(addr, stream);
    } catch (...) {
      slab_pages.clear();  // out of memory: the pages stay until reuse, as without a plan
    }
    executor_.OnFree(addr, e.origin == Origin::kArena ? Arena::SpanOf(e.size) : 0, stream, e.origin == Origin::kArena,
                     slab_pages);
  }
  if (known && residency_ != nullptr && e.origin == Origin::kArena) {
    std::vector<std::pair<uint64_t, uint64_t>> slabs;
    try {
      slabs = arena_.SlabPagesFreedBy(addr, stream, residency_->granularity());  // slabs left empty
    } catch (...) {
      slabs.clear();
    }
    executor_.ResidencyOnFree(addr, Arena::SpanOf(e.size), stream, slabs);
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
  EnsureDeviceInfo();
  uint64_t budget = stats_->budget_bytes.load(std::memory_order_relaxed);
  if (budget == 0) budget = config_.capacity.Resolve(*total, *free);  // the device could not be asked before
  const uint64_t used = arena_.usage().live_bytes;
  const uint64_t left = budget > used ? budget - used : 0;
  *free = static_cast<size_t>(std::min<uint64_t>(*free, left));
}

bool Session::InArena(uint64_t addr) const { return arena_.Contains(addr); }

// ---- ops ----

bool Session::WantRecording() const {
  return config_.mode != Mode::kUm && !degraded(Part::kRecording) &&
         stats_->recorded_iteration.load(std::memory_order_relaxed) == 0;
}

uint64_t Session::CountOp() {
  // Only once an iteration was recorded: before, there is nothing to count against (and no atomic to pay for).
  if (!counting_.load(std::memory_order_relaxed)) return kNoIndex;
  const uint64_t n = op_counter_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t p = counted_period_.load(std::memory_order_relaxed);
  const uint64_t b = counted_boundary_.load(std::memory_order_relaxed);
  if (p != 0 && n >= b && (n - b) % p == 0) {
    arena_.BeginIteration();
    stats_->iteration.fetch_add(1, std::memory_order_relaxed);
  }
  return n;
}

const ParamLayout& Session::LayoutOf(const OpDesc& d) {
  return d.driver ? layouts_.ForDriver(static_cast<CUfunction>(const_cast<void*>(d.func))) : layouts_.ForRuntime(d.func);
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
    const BufferEntry& b = t.buffer;
    h = HashMix(h, b.birth != 0 ? b.birth : b.start);
    h = HashMix(h, t.operand.ptr - b.start);
  }
  return h;
}

IterationDetector::Options Session::ShapeDetectorOptions() {
  IterationDetector::Options o;
  o.require_sync = true;
  return o;
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

bool Session::PrefetchOperandsLocked(const OpDesc& d, const std::vector<Touch>& touches, int device) {
  if (residency_ != nullptr) {
    // Nothing pages on demand: what is beyond the budget stays in host memory (read there, slowly) until a plan.
    const uint64_t g = residency_->granularity();
    for (const Touch& t : touches) {
      if (!Movable(t.buffer.origin) || t.buffer.size == 0 || !arena_.Contains(t.buffer.start)) continue;
      const uint64_t lo = AlignDown(t.buffer.start, g), hi = AlignUp(t.buffer.start + t.buffer.size, g);
      if (!residency_->Resident({lo, hi - lo})) return false;
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

RecordedOp* Session::AddOpLocked(const OpDesc& d, const std::vector<Touch>& touches, const ParamLayout* layout,
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
  op.off_device = !PrefetchOperandsLocked(d, touches, rec.device);
  probes_.Before(rec, op);
  if (api_.cudaEventCreateWithFlags != nullptr && api_.cudaEventRecord != nullptr) {
    LastErrorScope errors(api_);
    const cudaStream_t s = StreamOf(d.stream);
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
    const uint64_t n = CountOp();
    // Launches captured into a graph run later, unseen: nothing is replayed around them.
    if (n != kNoIndex && executor_.armed() && capture_depth_.load(std::memory_order_relaxed) == 0) {
      bool wants_launch = false;
      scope.position_ = executor_.Before(n, ShapeSignature(d), d.stream, &wants_launch);
      if (scope.position_ != Executor::kNoPosition) scope.session_ = this;
      if (wants_launch) {
        try {
          Relaunch launch;
          if (d.kind == trace::OpKind::kKernel) {
            launch = MakeKernelRelaunch(d, LayoutOf(d));
          } else if (d.relaunch) {
            launch = std::make_shared<const std::function<bool(const AddressMap&)>>(d.relaunch);
          }
          executor_.SetLaunch(scope.position_, std::move(launch));
        } catch (...) {
        }
      }
      HandleExecutorRequest();
    }
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
    const ParamLayout* layout = nullptr;
    {
      Registry::Reader reader(registry_);
      if (d.kind == trace::OpKind::kKernel) {
        layout = &LayoutOf(d);
        ScanKernelArgs(*layout, d.args, reader, &hits);
        const void* buf = nullptr;
        size_t size = 0;
        if (FindExtraBuffer(d.extra, &buf, &size)) ScanArgBuffer(buf, size, reader, &hits);
        for (const PointerHit& h : hits) touches.push_back(Touch{Operand{h.value, Access::kTouch}, h.buffer});
      } else {
        for (size_t i = 0; i < d.operands.size(); ++i) {
          const Operand& o = d.operands[i];
          const BufferEntry* e = o.ptr != 0 ? reader.Find(o.ptr) : nullptr;
          if (e != nullptr) touches.push_back(Touch{o, *e});
        }
      }
    }
    const uint64_t shape = ShapeSignature(d);
    if (!marker_mode_) {
      // What the iteration before this op left allocated: what was allocated for this op belongs to it.
      uint64_t live = arena_.usage().live_bytes + registry_.bytes(Origin::kDevice);
      live -= std::min(live, bytes_since_op_);
      bytes_since_op_ = 0;
      // Births name buffers by the shape of the op they follow, not its full signature: that one names
      // buffers by their births, and the chain would never repeat.
      last_op_signature_ = shape;
      allocs_since_op_ = 0;
      const bool launch = d.kind == trace::OpKind::kKernel || d.kind == trace::OpKind::kLibrary;
      const bool after_sync = sync_since_op_.exchange(false);
      const auto exact = detector_.Observe(Signature(shape, touches), live, after_sync, launch);
      const auto loose = by_shape_.Observe(shape, live, after_sync, launch);
      if (loose == IterationDetector::Step::kLocked || loose == IterationDetector::Step::kDiverged) {
        KARMA_LOG(kDebug, "by shapes alone: {} at op {}",
                  loose == IterationDetector::Step::kLocked ? fmt::format("period of {} ops found", by_shape_.period())
                                                            : std::string("the period diverged"),
                  by_shape_.ops());
      }
      // By shapes alone only when the signatures with buffers and offsets find no iteration while the shapes have
      // held theirs for a while: the application's allocator places each iteration's tensors elsewhere.
      if (!use_shape_ && !detector_.locked() && by_shape_.boundaries() > kShapeFallbackBoundaries) {
        use_shape_ = true;
        KARMA_LOG(kInfo, "the iteration's tensors lie elsewhere every time: iterations of {} ops found from the kernels "
                  "and shapes alone", by_shape_.period());
      }
      const IterationDetector& det = Detector();
      const auto step = use_shape_ ? loose : exact;
      if ((!det.locked() && det.ops() > kGiveUpOps) || det.divergences() > kGiveUpDivergences) {
        Degrade(Part::kRecording, fmt::format("no stable iteration after {} operations; mark iterations with "
                                              "KARMA_ITERATION_MARKER or karma_iteration_begin()",
                                              det.ops()));
        return scope;
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
          use_shape_ = false;
          break;
        default:
          break;
      }
    }
    FlushPendingAllocsLocked();
    if (recording_) {
      scope.op_ = AddOpLocked(d, touches, layout, shape);
      scope.rec_ = recording_;
      scope.session_ = this;
    }
  } catch (...) {
    Degrade(Part::kRecording, "an internal error while observing an operation");
  }
  return scope;
}

void Session::TimeIterationLocked() {
  const auto now = std::chrono::steady_clock::now();
  last_iteration_ns_ = boundary_at_ == std::chrono::steady_clock::time_point{} ? 0 : NsSince(boundary_at_);
  boundary_at_ = now;
}

void Session::OnBoundaryLocked() {
  arena_.BeginIteration();
  TimeIterationLocked();
  stats_->iteration.fetch_add(1, std::memory_order_relaxed);
  if (recording_) {
    FinishRecordingLocked();
  } else if (WantRecording() && (marker_mode_ || Detector().stable())) {
    StartRecordingLocked(marker_mode_);
  }
}

void Session::StartRecordingLocked(bool by_marker) {
  auto rec = std::make_shared<Recording>();
  rec->before_ns = last_iteration_ns_;
  rec->iteration = stats_->iteration.load(std::memory_order_relaxed);
  rec->by_marker = by_marker;
  if (api_.cudaGetDevice != nullptr) {
    LastErrorScope errors(api_);
    if (api_.cudaGetDevice(&rec->device) != cudaSuccess) errors.Failed();
  }
  recording_ = std::move(rec);
  recording_held_peak_.store(stats_->used_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  recording_active_.store(true, std::memory_order_release);
  SetState(live::State::kRecording);
  KARMA_LOG(kInfo, "recording iteration {}{}", recording_->iteration,
            by_marker ? " (marked)" : fmt::format(" ({} ops per iteration)", Detector().period()));
}

void Session::FinishRecordingLocked() {
  std::shared_ptr<Recording> rec = std::move(recording_);
  recording_.reset();
  recording_active_.store(false, std::memory_order_release);
  rec->t_end = std::chrono::steady_clock::now();
  probes_.Release();
  // Allocations since the last op belong to the next iteration (its first op has not been seen yet).
  const auto next = [this](uint64_t serial) {
    return std::any_of(pending_allocs_.begin(), pending_allocs_.end(),
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
    const uint64_t n = Detector().ops();
    op_counter_.store(n, std::memory_order_relaxed);
    counted_boundary_.store(n - 1 + Detector().period(), std::memory_order_relaxed);
    counted_period_.store(Detector().period(), std::memory_order_relaxed);
  } else {
    counted_period_.store(0, std::memory_order_relaxed);
  }
  counting_.store(true, std::memory_order_relaxed);
  if (!worker_.Post([this, rec] { WriteTrace(rec); })) WriteTrace(rec);
}

void Session::AbortRecordingLocked(const char* why) {
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
        st = trace::WriteKtraceFile(it->it, path);
      }
    }
    std::shared_ptr<const RecordedIteration> recorded;
    {
      std::lock_guard<std::mutex> lock(trace_mu_);
      if (st.ok()) {
        trace_path_ = path;
        KARMA_LOG(kInfo, "recorded iteration {} ({} ops, {} buffers) to {}", rec->iteration, it->it.ops.size(),
                  it->it.buffers.size(), path);
        if (rec->unused != 0) {
          KARMA_LOG(kInfo, "{} allocation{} the application held ({}) {} used by no op of the recorded iteration "
                    "(the largest, {}, allocated at {}): not in the plan",
                    rec->unused, rec->unused == 1 ? "" : "s", FormatBytes(rec->unused_bytes),
                    rec->unused == 1 ? "was" : "were",
                    FormatBytes(rec->largest_unused.size), sites_.Describe(rec->largest_unused.site));
        }
        KARMA_LOG(kInfo, "recording took {:.2f} s of wall clock (the iteration before it {:.2f} s): probes {:.2f} s "
                  "({} hashed through pinned memory)", std::chrono::duration<double>(rec->t_end - rec->t0).count(),
                  static_cast<double>(rec->before_ns) / 1e9, static_cast<double>(rec->probe_ns.load()) / 1e9,
                  FormatBytes(rec->probe_bytes.load()));
      } else if (it.ok()) {
        trace_error_ = st.message();
        KARMA_LOG(kWarn, "the recorded iteration could not be written: {}", st.message());
      } else {
        trace_error_ = st.message();
        KARMA_LOG(kWarn, "the recorded iteration could not be turned into a trace: {}", st.message());
      }
      if (it.ok()) {
        recorded = std::make_shared<const RecordedIteration>(std::move(it).value());
        recorded_ = recorded;
      }
    }
    if (recorded != nullptr && config_.mode != Mode::kRecord) PlanAndInstall(recorded, {});
  } catch (...) {
    KARMA_LOG(kWarn, "the recorded iteration could not be written (internal error)");
  }
}

std::string Session::DeviceName() {
  if (api_.cudaGetDeviceProperties == nullptr) return {};
  cudaDeviceProp prop{};
  int device = 0;
  LastErrorScope errors(api_);
  if ((api_.cudaGetDevice != nullptr && api_.cudaGetDevice(&device) != cudaSuccess) ||
      api_.cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    errors.Failed();
    return {};
  }
  return prop.name;
}

policy::HwProfile Session::PlanningProfile() {
  EnsureDeviceInfo();
  const std::string name = DeviceName();
  const policy::HwProfile& device = ProfileForDevice(name);
  if (residency_ != nullptr) {
    // The copy path moves at the copy engines' rates; the link trial measures managed memory's only.
    policy::HwProfile copy = device;
    copy.moves = policy::MovePath::kCopy;
    return copy;
  }
  if (config_.mode == Mode::kAuto) ReadLinkRecordOnce(name);
  std::lock_guard<std::mutex> lock(trace_mu_);
  return policy::WithLink(device, policy::RoundedRate(link_h2d_bw_), policy::RoundedRate(link_d2h_bw_));
}

void Session::ReadLinkRecordOnce(const std::string& device) {
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    if (link_record_read_) return;
    link_record_read_ = true;
  }
  if (config_.trace_dir.empty()) return;
  const std::string path = LinkRecordPath(config_.trace_dir, device);
  auto r = ReadLinkRecord(path);
  if (!r.ok()) {
    if (r.status().code() != Code::kNotFound) {
      KARMA_LOG(kWarn, "{}; planning with the profile's link rates", r.status().message());
    }
    return;
  }
  if (r->device != device) {
    KARMA_LOG(kInfo, "{} was measured on a {}, not on this {}: not used", path, r->device, device);
    return;
  }
  const policy::HwProfile& profile = ProfileForDevice(device);
  // Rates close to the profile's change nothing: this run would not plan again for them either.
  if (!LinkDeparts(profile, r->h2d_bw, r->d2h_bw)) return;
  std::lock_guard<std::mutex> lock(trace_mu_);
  if (link_h2d_bw_ > 0 || link_d2h_bw_ > 0) return;  // this run has measured its own
  link_h2d_bw_ = recorded_h2d_bw_ = r->h2d_bw;
  link_d2h_bw_ = recorded_d2h_bw_ = r->d2h_bw;
  recorded_went_back_ = std::move(r->went_back);
  KARMA_LOG(kInfo, "planning with the host link an earlier run measured on this device: {:.3g} GB/s to the device, "
            "{:.3g} GB/s to the host ({}; the profile says {:.3g} and {:.3g})", r->h2d_bw / 1e9, r->d2h_bw / 1e9,
            path, profile.h2d_bw() / 1e9, profile.d2h_bw() / 1e9);
}

policy::HwProfile Session::SettleRecordedLink(const RecordedIteration& rec, const policy::HwProfile& profile,
                                              uint64_t capacity, const std::vector<bool>& no_recompute) {
  std::vector<std::string> went_back;
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    if (recorded_went_back_.empty() || link_h2d_bw_ != recorded_h2d_bw_ || link_d2h_bw_ != recorded_d2h_bw_) {
      return profile;
    }
    went_back = recorded_went_back_;
  }
  const std::string key = PlanKey(PlanningIteration(rec.it, MovePageFor(profile)), profile, capacity, no_recompute);
  if (std::find(went_back.begin(), went_back.end(), key) == went_back.end()) return profile;
  const policy::HwProfile& device = ProfileForDevice(DeviceName());
  KARMA_LOG(kInfo, "an earlier run's plan for the link it measured ({}) replayed slower than the plan it replaced: "
            "planning on {}", policy::ProfileLabel(profile), policy::ProfileLabel(device));
  std::lock_guard<std::mutex> lock(trace_mu_);
  link_h2d_bw_ = link_d2h_bw_ = 0;
  recorded_went_back_.clear();
  link_settled_ = true;
  return device;
}

void Session::UpdateLinkRecord(std::function<void(LinkRecord*)> update) {
  if (config_.trace_dir.empty()) return;
  auto task = [this, update = std::move(update)] {
    struct stat st {};
    if (::stat(config_.trace_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;  // nothing recorded here
    const std::string device = DeviceName();
    const std::string path = LinkRecordPath(config_.trace_dir, device);
    LinkRecord r;
    if (auto read = ReadLinkRecord(path); read.ok() && read->device == device) r = std::move(read).value();
    r.device = device;
    update(&r);
    if (r.h2d_bw <= 0 && r.d2h_bw <= 0) return;
    if (Status st = WriteLinkRecord(path, r); !st.ok() && !link_record_warned_.exchange(true)) {
      KARMA_LOG(kWarn, "the measured link rates were not saved for later runs: {}", st.message());
    }
  };
  worker_.Post(task);
}

void Session::PlanAndInstall(const std::shared_ptr<const RecordedIteration>& rec,
                             const std::vector<bool>& no_recompute) {
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(trace_mu_);
    plan_error_ = why;
    KARMA_LOG(kWarn, "no plan replayed, running as um: {}", why);
    SetState(live::State::kUm);
  };
  try {
    const uint64_t period = counted_period_.load(std::memory_order_relaxed);
    if (!marker_mode_ && rec->it.ops.size() != period) {
      fail(fmt::format("the recording kept {} of the iteration's {} ops", rec->it.ops.size(), period));
      return;
    }
    policy::HwProfile profile = PlanningProfile();
    uint64_t capacity = stats_->budget_bytes.load(std::memory_order_relaxed);
    // On the copy path the device holds whole chunks: the pool's size is the budget.
    if (residency_ != nullptr) capacity = AlignDown(capacity, residency_->granularity());
    if (config_.mode == Mode::kAuto) profile = SettleRecordedLink(*rec, profile, capacity, no_recompute);
    // Compiles a plan and hands it to the executor, which runs it from the next iteration start.
    auto install = [&](const policy::Plan& plan, const std::string& path,
                       const policy::HwProfile& planned_with) -> Status {
      auto program = CompileProgram(*rec, plan, planned_with);
      KARMA_RETURN_IF_ERROR(program.status());
      {
        std::lock_guard<std::mutex> lock(trace_mu_);
        plan_key_ = plan.fingerprint;
      }
      InstallProgram(std::move(program).value(), path, planned_with);
      return Status::Ok();
    };
    if (config_.mode == Mode::kReplay) {
      auto read = policy::ReadPlanFile(config_.plan_path);
      if (!read.ok()) {
        fail(read.status().message());
        return;
      }
      std::string key = PlanKey(PlanningIteration(rec->it, MovePageFor(profile)), profile, capacity, no_recompute);
      // A plan made with the link rates another run measured names them.
      policy::HwProfile planned_with = profile;
      if (read->fingerprint != key && policy::ProfileFromLabel(profile, read->profile, &planned_with)) {
        key = PlanKey(PlanningIteration(rec->it, MovePageFor(planned_with)), planned_with, capacity, no_recompute);
      }
      if (read->fingerprint != key) {
        fail(fmt::format("KARMA_PLAN={} was made for inputs {}, this run's are {} (another program, iteration, "
                         "device profile or capacity)", config_.plan_path, read->fingerprint, key));
        return;
      }
      if (Status st = install(*read, config_.plan_path, planned_with); !st.ok()) fail(st.message());
      return;
    }
    PlanRequest req;
    req.recorded = rec.get();
    req.profile = profile;
    req.capacity = capacity;
    req.cache_dir = config_.trace_dir;
    req.no_recompute = no_recompute;
    req.cancel = &stop_planning_;
    auto outcome = MakeRuntimePlan(req);
    if (!outcome.ok()) {
      fail(outcome.status().message());
      return;
    }
    const uint64_t device_bytes = stats_->device_total_bytes.load(std::memory_order_relaxed);
    if (const std::string paged = DescribePagedOps(*outcome, rec->it, capacity, device_bytes);
        !paged.empty() && !paged_reported_) {
      KARMA_LOG(kWarn, "{}", paged);
      paged_reported_ = true;
    }
    if (const std::string late = DescribeLateFrees(*outcome, capacity); !late.empty() && !late_reported_) {
      KARMA_LOG(kWarn, "{}", late);
      late_reported_ = true;
    }
    if (outcome->reused) {
      KARMA_LOG(kInfo, "reusing the plan {} made for the same inputs", outcome->path);
    } else {
      // The in-core peak tells a plan that fits from a recording that missed memory (on an H100, ResNet-50 under
      // cudaMallocAsync planned "fits in core" for 1.91 GiB with 3.02 GiB allocated at the run's peak).
      const uint64_t held = recording_held_peak_.load(std::memory_order_relaxed);
      KARMA_LOG(kInfo, "planned on {} for {}: {:.2f} ms simulated, {:.2f} ms in core ({}; {} at the in-core peak, "
                "{} held at once while it was recorded); plan {}", policy::ProfileLabel(profile),
                FormatBytes(capacity), outcome->simulated_s * 1e3, outcome->incore_s * 1e3, outcome->plan.note,
                FormatBytes(outcome->incore_peak_bytes), FormatBytes(held),
                outcome->path.empty() ? "not saved" : outcome->path);
    }
    if (Status st = install(outcome->plan, outcome->path, profile); !st.ok()) {
      fail(st.message());
      return;
    }
    // Planner II improves on the plan now running, off the application's threads; a saved plan already had it. A
    // new plan costs an iteration that validates its recomputes again: it must be clearly faster.
    if (!config_.ilp || outcome->reused || outcome->plan.actions.empty()) return;
    constexpr double kClearlyFaster = 0.95;
    req.ilp = true;
    req.improve_on_s = kClearlyFaster * outcome->simulated_s;
    auto better = MakeRuntimePlan(req);
    if (!better.ok() || !better->improves) {
      KARMA_LOG(kInfo, "planner II found no plan {:.0f}% faster{}", 100 * (1 - kClearlyFaster),
                better.ok() ? "" : ": " + better.status().message());
      return;
    }
    if (Status st = install(better->plan, better->path, profile); !st.ok()) {
      KARMA_LOG(kWarn, "planner II's plan cannot be replayed ({}); the first plan stays", st.message());
      return;
    }
    KARMA_LOG(kInfo, "planner II: {:.2f} ms simulated ({}) replaces the first plan from the next iteration; plan {}",
              better->simulated_s * 1e3, better->plan.note, better->path.empty() ? "not saved" : better->path);
  } catch (const std::exception& e) {
    fail(std::string("internal error while planning: ") + e.what());
  } catch (...) {
    fail("internal error while planning");
  }
}

void Session::InstallProgram(std::shared_ptr<const ReplayProgram> program, const std::string& path,
                             const policy::HwProfile& planned_with) {
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    plan_path_ = path;
    plan_error_.clear();
    planned_with_ = planned_with;
  }
  int device = 0;
  if (api_.cudaGetDevice != nullptr) {
    LastErrorScope errors(api_);
    if (api_.cudaGetDevice(&device) != cudaSuccess) errors.Failed();
  }
  // With markers the program starts at the next one (OnMarker sets the base); until then nothing is replayed.
  const uint64_t period = counted_period_.load(std::memory_order_relaxed);
  const uint64_t base = marker_mode_ ? UINT64_MAX : counted_boundary_.load(std::memory_order_relaxed) - period;
  executor_.Install(std::move(program), base, device, op_counter_.load(std::memory_order_relaxed));
  installs_.fetch_add(1, std::memory_order_relaxed);
  SetState(live::State::kReplaying);
}

void Session::CheckPlanTrial() {
  const Executor::ProgramTime now = executor_.program_time();
  PlanTrial t;
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    t = trial_;
  }
  if (!t.active) {
    trial_ready_.store(false);
    return;
  }
  // The new plan starts at the next iteration start and is judged on its own timed iterations.
  if (now.serial == t.before.serial || now.iterations < kTrialIterations) return;
  trial_ready_.store(false);
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    trial_.active = false;
  }
  const bool back = now.median_ns > kTrialSlower * t.before.median_ns;
  KARMA_LOG(kInfo, "the plan made for the measured link replays at {:.2f} ms per iteration, the plan it replaced at "
            "{:.2f} ms: {}", now.median_ns / 1e6, t.before.median_ns / 1e6,
            back ? "going back to that plan" : "keeping it");
  if (!t.new_key.empty()) {
    UpdateLinkRecord([key = t.new_key, back](LinkRecord* r) { MarkWentBack(r, key, back); });
  }
  if (!back) return;
  auto task = [this, t] {
    {
      std::lock_guard<std::mutex> lock(trace_mu_);
      plan_key_ = t.key;
    }
    InstallProgram(t.before.program, t.path, t.profile);
  };
  worker_.Post(task);
}

std::shared_ptr<const RecordedIteration> Session::recorded() const {
  std::lock_guard<std::mutex> lock(trace_mu_);
  return recorded_;
}

void Session::PostReplan(bool trial) {
  std::shared_ptr<const RecordedIteration> rec;
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    rec = recorded_;
  }
  if (rec == nullptr || config_.mode == Mode::kReplay) return;  // a given plan is not replaced
  if (replanning_.exchange(true)) return;  // the plan not yet started will see every rejection and rate so far
  auto task = [this, rec, trial] {
    replanning_.store(false);
    const uint64_t installed = installs_.load(std::memory_order_relaxed);
    PlanAndInstall(rec, executor_.rejected_ops());
    if (!trial) return;
    if (installs_.load(std::memory_order_relaxed) != installed) {
      {
        std::lock_guard<std::mutex> lock(trace_mu_);
        trial_.new_key = plan_key_;
      }
      trial_ready_.store(true, std::memory_order_release);
    } else {
      std::lock_guard<std::mutex> lock(trace_mu_);
      trial_.active = false;
    }
  };
  if (!worker_.Post(task)) replanning_.store(false);
}

void Session::HandleExecutorRequest() {
  try {
    if (executor_.TakeLinkMeasured()) OnLinkMeasured();
    if (trial_ready_.load(std::memory_order_relaxed)) CheckPlanTrial();
  } catch (...) {
    KARMA_LOG(kWarn, "the measured link rates were not acted on (internal error)");
  }
  const Executor::Request r = executor_.TakeRequest();
  if (r == Executor::Request::kNone) return;
  try {
    if (r == Executor::Request::kReplan) {
      PostReplan();
    } else {
      executor_.Uninstall();
      std::lock_guard<std::mutex> lock(record_mu_);
      RestartRecordingLocked();
    }
  } catch (...) {
    Degrade(Part::kRecording, "an internal error while planning again");
  }
}

void Session::OnLinkMeasured() {
  const Executor::LinkRates l = executor_.link_rates();
  policy::HwProfile assumed;
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    assumed = planned_with_;
  }
  auto rate = [](double bw, uint64_t bytes) {
    return bw > 0 ? fmt::format("{:.3g} GB/s ({})", bw / 1e9, FormatBytes(bytes)) : std::string("not measured");
  };
  bool replan = LinkDeparts(assumed, l.h2d_bw, l.d2h_bw) && config_.mode != Mode::kReplay;
  bool settled = false;
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    settled = replan && link_settled_ &&
              !LinkDeparts(policy::WithLink(assumed, recorded_h2d_bw_, recorded_d2h_bw_), l.h2d_bw, l.d2h_bw);
  }
  replan = replan && !settled;
  KARMA_LOG(kInfo, "the plan's moves ran at {} to the device and {} to the host over {} iterations; the plan assumed "
            "{:.3g} and {:.3g} GB/s ({}){}", rate(l.h2d_bw, l.h2d_bytes), rate(l.d2h_bw, l.d2h_bytes), l.iterations,
            assumed.h2d_bw() / 1e9, assumed.d2h_bw() / 1e9, policy::ProfileLabel(assumed),
            replan    ? ": planning again with the measured rates"
            : settled ? ": an earlier run's plan for these rates replayed slower than the plan running, which stays"
                      : "");
  UpdateLinkRecord([h2d = policy::RoundedRate(l.h2d_bw), d2h = policy::RoundedRate(l.d2h_bw)](LinkRecord* r) {
    if (h2d > 0) r->h2d_bw = h2d;
    if (d2h > 0) r->d2h_bw = d2h;
  });
  if (!replan) return;
  // The plan replaying now, timed, is what the new one must beat.
  const Executor::ProgramTime before = executor_.program_time();
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    link_h2d_bw_ = l.h2d_bw;
    link_d2h_bw_ = l.d2h_bw;
    recorded_went_back_.clear();
    trial_ = PlanTrial{before.program != nullptr && before.iterations > 0, before, plan_path_, planned_with_,
                       plan_key_, {}};
  }
  PostReplan(true);
}

void Session::RestartRecordingLocked() {
  if (degraded(Part::kRecording)) return;
  detector_ = IterationDetector();
  by_shape_ = IterationDetector(ShapeDetectorOptions());
  use_shape_ = false;
  live_births_.clear();
  pending_allocs_.clear();
  counting_.store(false, std::memory_order_relaxed);
  counted_period_.store(0, std::memory_order_relaxed);
  stats_->recorded_iteration.store(0, std::memory_order_relaxed);
  stats_->period_ops.store(0, std::memory_order_relaxed);
  SetState(live::State::kDetecting);
  observing_.store(true, std::memory_order_relaxed);
}

std::string Session::plan_path() const {
  std::lock_guard<std::mutex> lock(trace_mu_);
  return plan_path_;
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
    TimeIterationLocked();
    if (executor_.armed()) executor_.OnMarker(op_counter_.load(std::memory_order_relaxed));
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
  std::string line = fmt::format("mode {}, {} iteration{}", ModeName(config_.mode), iterations,
                                 iterations == 1 ? "" : "s");
  if (get(s.period_ops) != 0) line += fmt::format(" ({} ops each)", get(s.period_ops));
  line += fmt::format(", peak {} allocated", FormatBytes(get(s.peak_used_bytes)));
  if (residency_ != nullptr) {
    line += fmt::format(", copy path: device pool at most {} ({} fetches or makes found no room and left their pages in "
                        "host memory)", FormatBytes(residency_->peak_device_bytes()), residency_->stranded());
  }
  if (const uint64_t peak = executor_.peak_device_bytes(); peak != 0) {
    // cudaMemGetInfo counts the CUDA context and what the libraries hold: what was in use before the first
    // allocation is set apart.
    const uint64_t baseline = std::min(peak, device_baseline_bytes_.load(std::memory_order_relaxed));
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
  std::lock_guard<std::mutex> lock(trace_mu_);
  if (!plan_path_.empty()) {
    line += "; plan " + plan_path_;
  } else if (!plan_error_.empty()) {
    line += "; no plan: " + plan_error_;
  }
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
      if (recording_ && !marker_mode_ && Detector().period() != 0 && recording_->ops.size() >= Detector().period()) {
        FinishRecordingLocked();
      } else if (recording_) {
        AbortRecordingLocked("the process exited during the recorded iteration");
      }
    }
    stop_planning_.store(true);
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
