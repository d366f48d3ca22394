// The in-process session of libkarma.so: configuration, the allocation arena and registry, iteration
// detection, recording, statistics, and degradation to pass-through.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "policy/hw_profile.h"
#include "ground/common/live_stats.h"
#include "runtime/residency/copy_residency.h"
#include "runtime/residency/arena.h"
#include "runtime/base/config.h"
#include "runtime/base/cuda_api.h"
#include "runtime/observe/detector.h"
#include "runtime/replay/executor.h"
#include "runtime/plan/link_record.h"
#include "runtime/base/live_view.h"
#include "runtime/observe/ops.h"
#include "runtime/observe/param_scan.h"
#include "runtime/observe/probes.h"
#include "runtime/observe/recorder.h"
#include "runtime/observe/registry.h"
#include "runtime/observe/sites.h"
#include "runtime/base/worker.h"

namespace karma::rt {

// The parts that can fail independently; each degrades to pass-through with one log line.
enum class Part : uint8_t { kArena = 0, kRecording = 1, kLiveView = 2 };

class Session;

// Brackets one intercepted op around its real call: End(ok) after the call returns.
class OpScope {
 public:
  OpScope() = default;
  OpScope(OpScope&& o) noexcept : session_(o.session_), rec_(std::move(o.rec_)), op_(o.op_), position_(o.position_) {
    o.op_ = nullptr;
    o.position_ = Executor::kNoPosition;
  }
  OpScope& operator=(OpScope&&) = delete;
  OpScope(const OpScope&) = delete;
  ~OpScope() = default;
  void End(bool ok) noexcept;

 private:
  friend class Session;
  Session* session_ = nullptr;
  std::shared_ptr<Recording> rec_;
  RecordedOp* op_ = nullptr;
  uint32_t position_ = Executor::kNoPosition;  // replayed at this position of the plan
};

class Session {
 public:
  // The process's session, created on the first hooked call (thread-safe); nullptr when KARMA_MODE=off, when
  // it could not start, or in a forked child. Never destroyed: hooks may run during static destruction.
  static Session* Get();
  // Tests: use `s` as the process session (nullptr restores the real one).
  static void InstallForTest(Session* s);

  // `late_resolver` fills the cuBLAS/cuDNN entries of `api` on first use (those libraries load late, if ever).
  Session(SessionConfig config, const CudaApi& api, int64_t pid, SymbolResolver late_resolver = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const SessionConfig& config() const { return config_; }
  const CudaApi& api() const { return api_; }
  // The table with `lib`'s entries resolved (once) now that the application uses that library.
  const CudaApi& ApiFor(CudaLib lib);
  live::Stats& stats() { return *stats_; }

  // ---- memory ----
  enum class Served { kServed, kOutOfMemory, kPassThrough };
  // A device allocation from the arena. kPassThrough: the caller makes the real call (then NoteAllocation).
  // `runtime_api`: the caller is a CUDA runtime function, whose out-of-memory error stays in cudaGetLastError.
  Served AllocateDevice(uint64_t size, StreamKey stream, bool runtime_api, uint64_t* addr);
  // Registers memory a real allocation function returned (passed through, the app's managed, host-pinned).
  void NoteAllocation(uint64_t addr, uint64_t size, Origin origin);
  enum class Freed { kArena, kInvalid, kOther };
  // kArena: freed here (the caller reports success). kInvalid: inside the arena but not a live block (the caller
  // reports cudaErrorInvalidValue / CUDA_ERROR_INVALID_VALUE, as the real call would). kOther: the caller makes
  // the real call; the registry has already forgotten the buffer.
  Freed FreeDevice(uint64_t addr, StreamKey stream);
  // free + used <= budget <= total, where used is what the application holds in the arena.
  void AdjustMemInfo(size_t* free, size_t* total);
  bool InArena(uint64_t addr) const;

  // ---- ops ----
  // True while ops are detected or recorded: only then do hooks need to describe their operands.
  bool observing() const {
    return observing_.load(std::memory_order_relaxed) && capture_depth_.load(std::memory_order_relaxed) == 0;
  }
  // True while a plan is replayed: library hooks then describe their calls' shapes.
  bool replaying() const { return executor_.armed(); }
  // Before the real call of every kernel, library call, copy and memset.
  OpScope BeginOp(const OpDesc& d) noexcept;
  void OnSync() noexcept;
  void OnIterationMarker() noexcept;
  void OnRangePush(const char* name) noexcept;
  void OnCaptureBegin() noexcept;
  void OnCaptureEnd() noexcept;

  // ---- lifecycle ----
  void Degrade(Part part, const std::string& why) noexcept;
  bool degraded(Part part) const { return degraded_[static_cast<int>(part)].load(std::memory_order_relaxed); }
  // At exit: finish a recording that is complete, wait for the worker, print the summary, remove the segment.
  void Shutdown() noexcept;
  void AfterForkInChild() noexcept;
  // Waits until the worker is idle (tests).
  void WaitForWorker();
  std::string SummaryLine() const;
  std::string trace_path() const;
  // The last recording as the executor sees it (null before one); tests.
  std::shared_ptr<const RecordedIteration> recorded() const;
  live::State state() const { return static_cast<live::State>(stats_->state.load(std::memory_order_relaxed)); }
  const Arena& arena() const { return arena_; }
  const Executor& executor() const { return executor_; }
  // The plan file in use (written or reused by auto, KARMA_PLAN for replay); empty when none.
  std::string plan_path() const;
  const Registry& registry() const { return registry_; }
  const IterationDetector& detector() const { return Detector(); }

 private:
  friend class OpScope;
  void SetState(live::State s);
  void EnsureDeviceInfo();
  // The copy residency where KARMA_RESIDENCY asks for it and the device supports it (once, with the budget).
  void ChooseResidency(uint64_t budget);
  void UpdateUsage();
  bool WantRecording() const;
  uint32_t CaptureSite();
  // A pointer operand found in an op (a kernel's pointer parameter: kTouch, extent unknown; a library call's with
  // the direction and extent its API states) and the buffer it points into.
  struct Touch {
    Operand operand;
    BufferEntry buffer;
  };
  // A kernel's parameter layout (queried once per function).
  const ParamLayout& LayoutOf(const OpDesc& d);
  // Function, grid, block and shape arguments; then with the buffers touched (their births and offsets).
  static uint64_t ShapeSignature(const OpDesc& d);
  static uint64_t Signature(uint64_t shape, const std::vector<Touch>& touches);
  static IterationDetector::Options ShapeDetectorOptions();
  // The detector whose iterations are used: detector_, or by_shape_ once use_shape_.
  const IterationDetector& Detector() const { return use_shape_ ? by_shape_ : detector_; }
  const std::string& KernelName(const OpDesc& d);
  // The op's number since the recording (kNoIndex before), counting iterations by the period.
  static constexpr uint64_t kNoIndex = UINT64_MAX;
  uint64_t CountOp();
  // On the worker after the recording: plan (or read KARMA_PLAN), compile and hand the program to the executor.
  void PlanAndInstall(const std::shared_ptr<const RecordedIteration>& rec, const std::vector<bool>& no_recompute);
  // The profile plans are made with: the device's (ProfileForDevice), with the host link's rates the executor
  // measured once they depart from it (link_).
  policy::HwProfile PlanningProfile();
  // Acts on what the executor asks for: a new plan, or a new recording.
  void HandleExecutorRequest();
  // The executor has timed the plan's moves: logs the rates, and plans again with them where they depart from the
  // profile the plan assumed.
  void OnLinkMeasured();
  // Plans the last recording again on the worker (the ops of rejected recomputes left out), unless a given plan
  // runs (KARMA_MODE=replay) or a new plan is already waiting to start. With `trial`, the plan it installs is
  // then tried against the one running now (trial_).
  void PostReplan(bool trial = false);
  // Hands a compiled program to the executor, which runs it from the next iteration start.
  void InstallProgram(std::shared_ptr<const ReplayProgram> program, const std::string& path,
                      const policy::HwProfile& planned_with);
  // Once the plan a trial installed has timed iterations: keeps it, or goes back to the plan it replaced.
  void CheckPlanTrial();
  void RestartRecordingLocked();
  std::string DeviceName();
  // The first time a plan is made in KARMA_MODE=auto: takes the link rates an earlier run on this device recorded
  // (link_record.h) for link_, logged. Under trace_mu_ for the members, with the file read before.
  void ReadLinkRecordOnce(const std::string& device);
  // Reads the link record (a new one where there is none or it is of another device), applies `update` and writes
  // it back, on the worker thread; a failure is logged once.
  void UpdateLinkRecord(std::function<void(LinkRecord*)> update);
  // `profile` (PlanningProfile) for planning `rec`, or the device's own profile where it carries the recorded link
  // rates and the record says the plan for them replayed slower for these inputs (then link_settled_).
  policy::HwProfile SettleRecordedLink(const RecordedIteration& rec, const policy::HwProfile& profile,
                                       uint64_t capacity, const std::vector<bool>& no_recompute);
  void OnBoundaryLocked();
  void StartRecordingLocked(bool by_marker);
  void FinishRecordingLocked();
  void AbortRecordingLocked(const char* why);
  // Registers a buffer: site, identity, and (while observing) its place in the op sequence.
  void RegisterBuffer(uint64_t addr, uint64_t size, Origin origin, StreamKey stream);
  void FlushPendingAllocsLocked();
  RecordedOp* AddOpLocked(const OpDesc& d, const std::vector<Touch>& touches, const ParamLayout* layout,
                          uint64_t shape);
  // The profiling iteration: the op's allocations are brought to the device before its start event, so its
  // measured duration is its own and not demand paging's.
  // False when some operand is in host memory and stays there (the copy path): the op's time is not its own.
  bool PrefetchOperandsLocked(const OpDesc& d, const std::vector<Touch>& touches, int device);
  void WriteTrace(const std::shared_ptr<Recording>& rec);

  const SessionConfig config_;
  CudaApi api_;
  Probes probes_{api_};
  const SymbolResolver late_resolver_;
  std::once_flag late_once_[kCudaLibCount];
  const int64_t pid_;
  std::unique_ptr<LiveView> live_view_;
  live::Stats local_stats_;
  live::Stats* stats_ = &local_stats_;
  std::atomic<bool> degraded_[3] = {};
  std::atomic<bool> forked_child_{false};
  std::atomic<bool> shut_down_{false};
  std::atomic<bool> stop_planning_{false};  // exiting: Planner II gives up (the heuristic plan stands)
  bool paged_reported_ = false;  // the ops larger than the budget were named (once per process)
  bool late_reported_ = false;   // memory the application frees after its last use was named (once per process)

  std::unique_ptr<CopyResidency> residency_;  // the copy path; null: managed memory (declared first: outlives users)
  Arena arena_;
  Registry registry_;
  Executor executor_;
  ParamLayouts layouts_;
  SiteTable sites_;
  Worker worker_;
  std::once_flag device_info_once_;
  // Device memory in use (cudaMemGetInfo) when the first allocation came: the context and the libraries.
  std::atomic<uint64_t> device_baseline_bytes_{0};
  // The most bytes the application held at once (arena blocks and device allocations) while the last recording ran:
  // beside the recorded iteration's in-core peak, it tells frees long after the last uses the recording saw, or
  // uses it did not see.
  std::atomic<uint64_t> recording_held_peak_{0};

  // Detection and recording, under record_mu_.
  std::mutex record_mu_;
  // Iterations are found from op signatures with the buffers and offsets of their pointers (detector_) and, for
  // allocators that place each iteration's tensors elsewhere (in other segments, at other offsets), from their
  // shape signatures alone (by_shape_: identical layers then look alike, so its periods must contain a host
  // synchronization). by_shape_ is used only while detector_ holds no period.
  IterationDetector detector_;
  IterationDetector by_shape_{ShapeDetectorOptions()};
  bool use_shape_ = false;
  std::shared_ptr<Recording> recording_;
  std::unordered_map<const void*, std::string> kernel_names_;
  // Allocations since the last op: they belong to the iteration of the next op, which may be the first of a
  // recording (a buffer is allocated just before the first kernel that writes it).
  std::vector<BufferEntry> pending_allocs_;
  uint64_t last_op_signature_ = 0;  // ShapeSignature of the last op
  std::unordered_map<uint64_t, uint64_t> live_births_;  // birth group -> buffers of it alive (while observing)
  uint64_t allocs_since_op_ = 0;
  uint64_t bytes_since_op_ = 0;
  void TimeIterationLocked();  // at each iteration start: boundary_at_, last_iteration_ns_
  std::chrono::steady_clock::time_point boundary_at_;  // the last iteration start
  uint64_t last_iteration_ns_ = 0;                     // the wall clock of the iteration before it
  bool marker_mode_ = false;
  uint64_t markers_ = 0;
  std::atomic<bool> observing_{false};   // ops go through detection/recording
  std::atomic<bool> recording_active_{false};
  std::atomic<bool> sync_since_op_{false};
  std::atomic<int> capture_depth_{0};

  // Iteration counting once detection has stopped: ops since a known boundary, modulo the period.
  std::atomic<bool> counting_{false};
  std::atomic<uint64_t> op_counter_{0};
  std::atomic<uint64_t> counted_period_{0};
  std::atomic<uint64_t> counted_boundary_{0};

  mutable std::mutex trace_mu_;
  std::string trace_path_;
  std::string trace_error_;
  std::shared_ptr<const RecordedIteration> recorded_;  // the last recording, kept for planning again
  std::string plan_path_;
  std::string plan_error_;
  std::atomic<bool> replanning_{false};
  double link_h2d_bw_ = 0, link_d2h_bw_ = 0;  // measured rates that plans use (0: the profile's); under trace_mu_
  // The link record an earlier run left (link_record.h), read at the first plan of KARMA_MODE=auto: its rates are
  // link_ until this run measures its own. `link_settled_`: the record said the plan for its rates replayed slower
  // for these inputs, so the first plan used the profile's figures and the same measurement plans nothing new.
  bool link_record_read_ = false;
  bool link_settled_ = false;
  double recorded_h2d_bw_ = 0, recorded_d2h_bw_ = 0;
  std::vector<std::string> recorded_went_back_;  // the record's went_back while its rates are link_
  std::atomic<bool> link_record_warned_{false};
  std::string plan_key_;  // the key (PlanKey) of the plan installed last; under trace_mu_
  policy::HwProfile planned_with_ = policy::DefaultProfile();  // the profile of the plan installed last; trace_mu_
  std::atomic<uint64_t> installs_{0};  // programs handed to the executor
  // A plan made for the measured link replaces a plan that was replaying: it must replay no slower than that one
  // did (the simulator can rank two plans wrongly), else the session goes back to it. Under trace_mu_.
  struct PlanTrial {
    bool active = false;
    Executor::ProgramTime before;  // the plan it replaced, timed
    std::string path;
    policy::HwProfile profile{};
    std::string key;      // the replaced plan's key
    std::string new_key;  // the key of the plan on trial, once installed
  };
  PlanTrial trial_;
  std::atomic<bool> trial_ready_{false};  // the trial's plan is installed: compare once it is timed
};

}  // namespace karma::rt
