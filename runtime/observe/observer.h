// The observation of the hooks' stream of ops: the allocation registry, iteration detection, the life cycle of a
// recording, and counting iterations by the period once one was recorded.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ground/common/live_stats.h"
#include "runtime/base/config.h"
#include "runtime/base/cuda_api.h"
#include "runtime/base/streams.h"
#include "runtime/base/worker.h"
#include "runtime/observe/detector.h"
#include "runtime/observe/ops.h"
#include "runtime/observe/param_scan.h"
#include "runtime/observe/probes.h"
#include "runtime/observe/recorder.h"
#include "runtime/observe/registry.h"
#include "runtime/observe/sites.h"

namespace karma::rt {

// A pointer operand found in an op (a kernel's pointer parameter: kTouch, extent unknown; a library call's with the
// direction and extent its API states) and the buffer it points into.
struct Touch {
  Operand operand;
  BufferEntry buffer;
};

// What the observer needs of the layers above it (the arena, the executor, the session), which it may not include.
class ObserverHost {
 public:
  virtual ~ObserverHost() = default;
  // An iteration starts (found or marked): the arena places the iteration's allocations where it did the last time.
  virtual void BeginIteration() = 0;
  // Bytes the application holds in arena blocks now.
  virtual uint64_t ArenaLiveBytes() = 0;
  // The profiling iteration: the op's allocations are brought to the device before its start event, so that its
  // measured duration is its own and not demand paging's. False when some operand is in host memory and stays there
  // (the copy path): the op's time is not its own. Under the observer's lock.
  virtual bool PrefetchOperandsLocked(const OpDesc& d, const std::vector<Touch>& touches, int device) = 0;
  // An explicit iteration marker at op `op` (the op count since the recording).
  virtual void OnMarker(uint64_t op) = 0;
  virtual bool RecordingDegraded() const = 0;
  // Recording degrades to pass-through with one log line (Session::Degrade).
  virtual void DegradeRecording(const std::string& why) = 0;
  // A recording ended complete: its trace is written, and planned, off the application's threads.
  virtual void RecordingFinished(std::shared_ptr<Recording> rec) = 0;
};

// Names a buffer by where in the op sequence it was allocated: the same allocation of every iteration follows the
// same op, after as many others, with the same size, wherever the allocator put it. Under the observer's lock.
class Births {
 public:
  struct Birth {
    uint64_t birth = 0;
    uint64_t group = 0;
  };
  // A buffer allocated now; `bytes`: what it adds to the bytes held (0 for memory that is not the device's).
  Birth Name(uint64_t size, StreamKey stream, uint64_t bytes);
  // A buffer of `group` was freed.
  void Died(uint64_t group);
  // An op is observed, of shape signature `shape`: returns the bytes allocated since the op before (they belong to
  // this op's iteration) and starts counting for the next.
  uint64_t OpSeen(uint64_t shape);
  // Allocations since the last op: they belong to the iteration of the next op, which may be the first of a
  // recording (a buffer is allocated just before the first kernel that writes it).
  void Pend(const BufferEntry& e);
  const std::vector<BufferEntry>& pending() const { return pending_; }
  void ClearPending() { pending_.clear(); }
  // Forgets the buffers alive and pending (a new detection).
  void Reset();

 private:
  std::vector<BufferEntry> pending_;
  uint64_t last_op_shape_ = 0;                          // ShapeSignature of the last op
  std::unordered_map<uint64_t, uint64_t> live_births_;  // birth group -> buffers of it alive (while observing)
  uint64_t allocs_since_op_ = 0;
  uint64_t bytes_since_op_ = 0;
};

// Iterations are found from op signatures with the buffers and offsets of their pointers (the exact detector) and,
// for allocators that place each iteration's tensors elsewhere (in other segments, at other offsets), from their
// shape signatures alone (identical layers then look alike, so its periods must contain a host synchronization).
// The one by shapes is used only while the exact one holds no period. Under the observer's lock.
class DetectorPair {
 public:
  // Feeds an op to both detectors: the step of the one in use.
  IterationDetector::Step Observe(uint64_t shape, uint64_t signature, uint64_t live, bool after_sync, bool launch);
  // The detector whose iterations are used.
  const IterationDetector& used() const { return use_shape_ ? by_shape_ : exact_; }
  // The iteration diverged: the exact detector is used again until the one by shapes has held its period anew.
  void Diverged() { use_shape_ = false; }
  // Detection from scratch; rejected periods stay rejected (IterationDetector::Reject).
  void Reset();
  void Reject(uint64_t period);

 private:
  static IterationDetector::Options ShapeOptions();
  IterationDetector exact_;
  IterationDetector by_shape_{ShapeOptions()};
  bool use_shape_ = false;
};

// Iteration counting once detection has stopped: ops since a known boundary, modulo the period. Atomics, read on
// every op without a lock.
class IterationCounter {
 public:
  // The op's number since the recording (kNoIndex before); `*starts`: the op starts an iteration.
  static constexpr uint64_t kNoIndex = UINT64_MAX;
  uint64_t Count(bool* starts);
  // Counting starts at op `ops`, which starts an iteration of `period` ops.
  void Start(uint64_t ops, uint64_t period);
  // Counting starts without a period: iterations are marked.
  void StartMarked();
  void Stop();
  bool counting() const { return counting_.load(std::memory_order_relaxed); }
  uint64_t ops() const { return op_counter_.load(std::memory_order_relaxed); }
  uint64_t period() const { return counted_period_.load(std::memory_order_relaxed); }
  uint64_t boundary() const { return counted_boundary_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> counting_{false};
  std::atomic<uint64_t> op_counter_{0};
  std::atomic<uint64_t> counted_period_{0};
  std::atomic<uint64_t> counted_boundary_{0};
};

// Observes ops and allocations while the session detects or records (recording mode, auto, replay), and counts ops
// afterwards. Thread-safe: the detection and recording state is under one lock (mu_), what every op reads is atomic.
class Observer {
 public:
  static constexpr uint64_t kNoIndex = IterationCounter::kNoIndex;

  Observer(const SessionConfig& config, const CudaApi& api, Worker& worker, ObserverHost* host);
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;
  // The statistics to update (the live view's segment, once it exists).
  void SetStats(live::Stats* stats) { stats_ = stats; }

  // ---- state ----
  // True while ops go through detection and recording.
  bool active() const { return observing_.load(std::memory_order_relaxed); }
  // True while ops are detected or recorded outside a graph capture: only then do hooks describe their operands.
  bool observing() const { return active() && capture_depth_.load(std::memory_order_relaxed) == 0; }
  // Inside a graph capture: its launches run later, unseen.
  bool capturing() const { return capture_depth_.load(std::memory_order_relaxed) > 0; }
  void SetActive(bool on) { observing_.store(on, std::memory_order_relaxed); }
  bool marker_mode() const { return marker_mode_; }
  const IterationDetector& detector() const { return detection_.used(); }
  const IterationCounter& counter() const { return counter_; }
  // The most bytes the application held at once while the last recording ran.
  uint64_t held_peak() const { return held_peak_.load(std::memory_order_relaxed); }
  Registry& registry() { return registry_; }
  const Registry& registry() const { return registry_; }
  SiteTable& sites() { return sites_; }

  // ---- allocations ----
  // Registers a buffer: site, identity, and (while observing) its place in the op sequence; `bytes` as for
  // Births::Name.
  void RegisterBuffer(uint64_t addr, uint64_t size, Origin origin, StreamKey stream, uint64_t bytes);
  // Forgets the buffer at `addr` (false: none is registered there) and records its free.
  bool ForgetBuffer(uint64_t addr, BufferEntry* e);
  // The application holds `used` bytes now: beside the recorded iteration's in-core peak, the most it held while
  // recording tells frees long after the last uses the recording saw, or uses it did not see.
  void NoteUsed(uint64_t used);

  // ---- ops ----
  // A kernel's parameter layout (queried once per function).
  const ParamLayout& LayoutOf(const OpDesc& d);
  // Function, grid, block and shape arguments.
  static uint64_t ShapeSignature(const OpDesc& d);
  // The op's number since the recording (kNoIndex before), counting iterations by the period.
  uint64_t CountOp();
  // The recorded op an observed op became (null when it is not recorded), ended by EndOp after its real call.
  struct Observed {
    std::shared_ptr<Recording> rec;
    RecordedOp* op = nullptr;
  };
  // Detects and records one op, before its real call; only while active() outside graph captures.
  Observed Observe(const OpDesc& d) noexcept;
  void EndOp(Recording& rec, RecordedOp& op, bool ok) noexcept;
  void OnSync() noexcept;
  void OnIterationMarker() noexcept;
  // A graph capture begins: true when it is the outermost one. Observation ends (graphs replay launches unseen).
  bool EnterCapture() noexcept;
  void AbandonForCapture() noexcept;
  // A graph capture ends: true when it was the outermost one.
  bool LeaveCapture() noexcept;

  // ---- recording life cycle ----
  // Detection anew (the executor found the plan's iteration gone), unless recording degraded; `rejected_period`
  // (0: none), the period that kept diverging, is not chosen again (IterationDetector::Reject).
  void RestartRecording(uint64_t rejected_period = 0);
  // At exit: finishes a recording that is complete, abandons one that is not.
  void EndRecordingAtExit();

 private:
  void SetState(live::State s) { stats_->state.store(static_cast<uint32_t>(s), std::memory_order_relaxed); }
  bool WantRecording() const;
  uint32_t CaptureSite();
  // Buffers and offsets: the signature of an op of shape signature `shape` that touches `touches`.
  static uint64_t Signature(uint64_t shape, const std::vector<Touch>& touches);
  const std::string& KernelName(const OpDesc& d);
  // The op's pointer operands that hit registered buffers; the kernel's parameter layout (null for other ops).
  const ParamLayout* ScanOperands(const OpDesc& d, std::vector<Touch>* touches);
  // Feeds the op to the detectors and acts on their step; false when detection gave up.
  bool DetectLocked(const OpDesc& d, uint64_t shape, const std::vector<Touch>& touches);
  void TimeIterationLocked();  // at each iteration start: boundary_at_, last_iteration_ns_
  void OnBoundaryLocked();
  void StartRecordingLocked(bool by_marker);
  void FinishRecordingLocked();
  void AbortRecordingLocked(const char* why);
  void FlushPendingAllocsLocked();
  RecordedOp* AddOpLocked(const OpDesc& d, const std::vector<Touch>& touches, const ParamLayout* layout,
                          uint64_t shape);
  // The op's events: its start recorded now, its end after the real call (EndOp).
  void CreateOpEventsLocked(RecordedOp& op, StreamKey stream);

  const SessionConfig& config_;
  const CudaApi& api_;
  Worker& worker_;
  ObserverHost* const host_;
  live::Stats* stats_ = nullptr;
  Probes probes_{api_};
  Registry registry_;
  ParamLayouts layouts_{api_};
  SiteTable sites_;
  IterationCounter counter_;
  std::atomic<uint64_t> held_peak_{0};

  // Detection and recording, under mu_.
  std::mutex mu_;
  DetectorPair detection_;
  Births births_;
  std::shared_ptr<Recording> recording_;
  std::unordered_map<const void*, std::string> kernel_names_;
  std::chrono::steady_clock::time_point boundary_at_;  // the last iteration start
  uint64_t last_iteration_ns_ = 0;                     // the wall clock of the iteration before it
  bool marker_mode_ = false;
  uint64_t markers_ = 0;
  std::atomic<bool> observing_{false};  // ops go through detection/recording
  std::atomic<bool> recording_active_{false};
  std::atomic<bool> sync_since_op_{false};
  std::atomic<int> capture_depth_{0};
};

}  // namespace karma::rt
