// The in-process session of libkarma.so: configuration, device memory, the observer, planning control, the
// executor, statistics, and degradation to pass-through; what interpose/'s hook handlers call.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ground/common/live_stats.h"
#include "runtime/base/config.h"
#include "runtime/base/cuda_api.h"
#include "runtime/base/live_view.h"
#include "runtime/base/worker.h"
#include "runtime/observe/observer.h"
#include "runtime/replay/executor.h"
#include "runtime/session/data_parallel_memory.h"
#include "runtime/session/device_memory.h"
#include "runtime/session/plan_control.h"

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

class Session : private ObserverHost {
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
  // For an address in the arena: `attributes` as for device memory of the arena's device, and true, whatever backs
  // it now (managed memory; on the copy path a device or host chunk, or for a moment nothing, where a driver would
  // call it unregistered or refuse it); false elsewhere.
  bool ArenaPointerAttributes(uint64_t addr, cudaPointerAttributes* attributes) const;

  // ---- ops ----
  // True while ops are detected or recorded: only then do hooks need to describe their operands.
  bool observing() const { return observer_.observing(); }
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
  const Arena& arena() const { return memory_.arena(); }
  const Executor& executor() const { return executor_; }
  // The plan file in use (written or reused by auto, KARMA_PLAN for replay); empty when none.
  std::string plan_path() const;
  const Registry& registry() const { return observer_.registry(); }
  const IterationDetector& detector() const { return observer_.detector(); }

 private:
  friend class OpScope;
  void SetState(live::State s);
  void UpdateUsage();
  // Registers a buffer with the observer, and gives it to the residency and the executor.
  void RegisterBuffer(uint64_t addr, uint64_t size, Origin origin, StreamKey stream);
  // Copies and memsets on the copy path: their operands mapped before the call (CopyResidency::AwaitSettled).
  void SettleOperands(const OpDesc& d) noexcept;
  // The op at position `position` of the plan replays now: the executor may issue it again, so it keeps the launch.
  void KeepLaunch(const OpDesc& d, uint32_t position);
  // Acts on what the executor asks for: a new plan, a new recording, the measured link, the trial.
  void HandleExecutorRequest();

  // ObserverHost: the arena, the executor and degradation, for the observer.
  void BeginIteration() override;
  uint64_t ArenaLiveBytes() override;
  bool PrefetchOperandsLocked(const OpDesc& d, const std::vector<Touch>& touches, int device) override;
  void OnMarker(uint64_t op) override;
  bool RecordingDegraded() const override { return degraded(Part::kRecording); }
  void DegradeRecording(const std::string& why) override { Degrade(Part::kRecording, why); }
  void RecordingFinished(std::shared_ptr<Recording> rec) override;

  const SessionConfig config_;
  CudaApi api_;
  const SymbolResolver late_resolver_;
  std::once_flag late_once_[kCudaLibCount];
  const int64_t pid_;
  std::unique_ptr<LiveView> live_view_;
  live::Stats local_stats_;
  live::Stats* stats_ = &local_stats_;
  std::atomic<bool> degraded_[3] = {};
  std::atomic<bool> forked_child_{false};
  std::atomic<bool> shut_down_{false};

  // Destroyed bottom-up: the worker, whose tasks use the others, first; the memory (the copy residency first of it)
  // outlives the executor that moves it.
  DeviceMemory memory_;
  Executor executor_;
  DataParallelMemory data_parallel_;
  Observer observer_;
  PlanControl plan_;
  Worker worker_;
};

}  // namespace karma::rt
