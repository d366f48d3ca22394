// The replay executor: runs a compiled plan alongside the application, issuing prefetches, evictions, discards
// and recomputes on its own streams, ordered against the application's streams with events.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ground/common/live_stats.h"
#include "ground/common/managed_pages.h"
#include "runtime/residency/residency.h"
#include "runtime/base/cuda_api.h"
#include "runtime/residency/mover.h"
#include "runtime/observe/ops.h"
#include "runtime/replay/replay_program.h"

namespace karma::rt {

// Positions: op number n (the session's count of ops since the recording) is at position (n - base) % period
// of the iteration. Each position's op is checked against the recorded one (its shape signature); a mismatch is
// a divergence: nothing more is issued in that iteration (managed memory keeps results correct), buffers
// discarded for a recompute are rebuilt at once, and three divergent iterations in a row ask the session for a
// new recording.
//
// Ordering: an action anchored "after op p" waits on an event recorded on op p's stream right after its launch;
// a prefetch an op waits for makes that op's stream wait on the prefetch's event, only if it has not completed;
// a discard makes the stream of the op it follows wait for it (nothing of that stream may run before the
// discard does); a recompute is launched on the stream of the op it precedes. Prefetches go on one stream
// (host-to-device), evictions on another (device-to-host), discards on a third, so each copy engine serves its
// queue first-in first-out as the plan assumes.
//
// Recompute validation: the first time a recompute is due, its targets were evicted instead of discarded; every
// buffer its launches use is copied to the host, the bytes a discard would destroy (the targets' bytes in whole
// pages of their move ranges) are overwritten with their complement, the launches run, and every buffer must come
// out bit-identical (targets rebuilt to the values they hold, inputs and side outputs untouched): a launch that
// leaves part of a target as it was fails. Otherwise the buffers are restored from the copies, the recompute is
// rejected (its targets are swapped from then on) and the session is asked for a new plan without those ops.
// Outputs whose recorded memory the application has freed meanwhile are redirected to scratch memory of the
// executor's own.
//
// Measurements (the exit summary and the live view): bytes moved, recomputed launches, "faults" — reads of a
// buffer the executor had moved off the device and not brought back, which demand paging serves — prefetch
// hits (complete when needed) and misses, stalls — for each miss, the time from when the waiting stream would
// have started the op to the prefetch's completion, from CUDA events — and iteration times between iteration
// starts, also from events on the application's stream. Peak device residency comes from cudaMemGetInfo, sampled
// at each iteration start and at the op where the plan holds the most, from the second replayed iteration on.
// The wall time each thread spends inside the managed-memory calls (and the application's threads waiting for the
// mover threads) is summed per side: on an H100 a batched move held its caller for the transfer.
class Executor {
 public:
  static constexpr uint32_t kNoPosition = UINT32_MAX;

  Executor(const CudaApi& api, live::Stats* stats);
  ~Executor();
  // Prefetches and evictions that leave together go in one batched call (default), or one call per range
  // (KARMA_BATCH_MOVES=0).
  void SetBatchMoves(bool on) { batch_moves_ = on; }
  // Prefetches and evictions are issued from two threads of the executor's own (one per direction) instead of
  // inside the application's launch (KARMA_MOVE_THREADS=1): on an H100 a batched move blocked its caller for the
  // transfer. Set before the first program is installed.
  void SetMoveThreads(bool on);
  // The plan's moves go through `residency` (the copy path) instead of managed-memory calls: evictions, fetches,
  // drops of dead values and device memory for recompute targets and new allocations, each after the events the
  // managed path orders its calls by. Set before the first program is installed; no mover threads then.
  void SetResidency(::karma::rt::Residency* residency);
  // After fork() in the child: the mover threads do not exist there.
  void AbandonAfterFork();
  // Where the statistics go (the live view's segment once it exists).
  void SetStats(live::Stats* stats) { stats_ = stats; }
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // From the worker: run `program` from the next iteration start on. `base` is the number of an op that starts
  // an iteration, or UINT64_MAX for the next explicit marker (OnMarker); `next_op`, where given, the number of the
  // op the application launches next.
  void Install(std::shared_ptr<const ReplayProgram> program, uint64_t base, int device,
               uint64_t next_op = UINT64_MAX);
  // Stops replaying (re-recording, degradation); in-flight work completes on its own.
  void Uninstall();
  bool armed() const { return armed_.load(std::memory_order_relaxed); }

  // Before op number `n`'s real call; returns its position for After(), or kNoPosition when nothing is replayed.
  // `wants_launch`: a recompute re-runs this op, so the caller should hand its launch over (SetLaunch).
  uint32_t Before(uint64_t n, uint64_t shape, StreamKey stream, bool* wants_launch);
  // This iteration's launch of the op at `position`: a recompute re-runs ops with the arguments of the current
  // iteration (random seeds and step counters change between iterations).
  void SetLaunch(uint32_t position, Relaunch launch);
  void After(uint32_t position, bool ok);
  // An allocation of the application on `stream`, made before op number `next_op`.
  void OnAllocation(uint64_t addr, uint64_t size, uint64_t next_op, StreamKey stream, bool arena_block);
  // Before the arena frees a block: its contents are dead, so its pages leave the device without a write-back (a
  // small block's: the slab pages it leaves empty, Arena::SlabPagesFreedBy).
  void OnFree(uint64_t addr, uint64_t span, StreamKey stream, bool arena_block,
              std::span<const std::pair<uint64_t, uint64_t>> slab_pages = {});
  // The copy path, whether a plan runs or not: an arena block's pages get device memory before the application
  // writes it (the allocating stream waits), and a freed block's whole pages go back to the pool.
  void ResidencyOnAllocation(uint64_t addr, uint64_t span, StreamKey stream);
  void ResidencyOnFree(uint64_t addr, uint64_t span, StreamKey stream,
                       std::span<const std::pair<uint64_t, uint64_t>> empty_slabs);
  // With explicit iteration markers: the next op starts an iteration.
  void OnMarker(uint64_t next_op);

  // What the session must do: nothing, record again (repeated divergence), or plan again without the ops of
  // rejected recomputes (rejected_ops()).
  enum class Request : uint8_t { kNone = 0, kRerecord = 1, kReplan = 2 };
  Request TakeRequest() { return static_cast<Request>(request_.exchange(0, std::memory_order_acq_rel)); }
  std::vector<bool> rejected_ops() const;
  // The host link as the plan's moves found it: per direction, the bytes the plan's prefetches (to the device) or
  // evictions (to the host) moved over the time from each move's start on its stream to its completion (CUDA
  // events), summed over replayed iterations from the second of each program on, until each direction that moves
  // has moved enough to tell (kLinkMinBytes; kLinkMaxIterations at most). Measured once per process; a rate is 0
  // where too little moved that way. The session plans again with rates that depart from its profile's.
  struct LinkRates {
    double h2d_bw = 0, d2h_bw = 0;  // bytes/s
    uint64_t h2d_bytes = 0, d2h_bytes = 0;
    uint32_t iterations = 0;
  };
  static constexpr uint64_t kLinkMinBytes = 16ull << 20;
  static constexpr uint32_t kLinkMinIterations = 2, kLinkMaxIterations = 8;
  LinkRates link_rates() const;
  // The running program's steady iteration time: CUDA events at iteration starts on the application's stream,
  // from its kTimedFrom-th replayed iteration on (the first validates recomputes), iterations that did not diverge.
  // `serial` numbers the programs in the order they started running (0: none yet).
  struct ProgramTime {
    std::shared_ptr<const ReplayProgram> program;
    uint64_t serial = 0;
    uint32_t iterations = 0;  // timed so far
    double median_ns = 0;     // of those (0: none)
  };
  static constexpr uint32_t kTimedFrom = 2;
  ProgramTime program_time() const;
  // True once, when link_rates() has become final with a rate measured.
  bool TakeLinkMeasured() {
    return link_measured_.load(std::memory_order_relaxed) && link_measured_.exchange(false, std::memory_order_acq_rel);
  }
  // Measurements of iterations that have completed; called at shutdown for the last ones.
  void Flush();
  uint64_t peak_device_bytes() const { return peak_device_.load(std::memory_order_relaxed); }
  // Device residency in steady replayed iterations (from a program's kTimedFrom-th replayed iteration on, those
  // that did not diverge; the last one, which no iteration start ends, is left out): cudaMemGetInfo's used bytes
  // where residency is sampled, and how far they exceed what the program holds for the op about to run there
  // (the plan's device bytes). The least excess is memory outside the plan present
  // throughout (the CUDA context beyond what it held before the first allocation, modules loaded since, library
  // memory, buffers' page rounding); the rest of the most is what the replay held beyond the program.
  struct Residency {
    uint32_t iterations = 0;
    uint32_t samples = 0;
    uint64_t peak = 0;                     // most used bytes (the copy path: its live values)
    int64_t above_min = 0, above_max = 0;  // used less the plan's bytes: least and most
    uint32_t above_max_at = 0;             // the position of the most
    // Adds `other`'s samples (and iterations).
    void Merge(const Residency& other) {
      if (other.samples == 0) return;
      if (samples == 0 || other.above_min < above_min) above_min = other.above_min;
      if (samples == 0 || other.above_max > above_max) {
        above_max = other.above_max;
        above_max_at = other.above_max_at;
      }
      peak = std::max(peak, other.peak);
      samples += other.samples;
      iterations += other.iterations;
    }
  };
  Residency steady_residency() const;
  // The managed-memory calls per replayed iteration by kind, with the wall time they held their threads (empty
  // before a replay): for the log at exit.
  std::string CallsLine() const;
  std::string program_summary() const;

 private:
  enum class Check : uint8_t { kUnvalidated = 0, kValid = 1, kRejected = 2 };
  // Kinds of managed-memory call (and the wait for a mover job), for CallsLine.
  enum CallKind : int {
    kPrefetchCall, kEvictCall, kDiscardCall, kDiscardAndPrefetchCall, kAllocationCall, kMoverWait, kCallKinds
  };
  struct CallKindStats {
    std::atomic<uint64_t> calls{0}, ns{0};
  };
  class HeldFor;
  struct Range {
    uint64_t addr = 0, bytes = 0;
  };
  // The pointer and size arrays of the batch calls (cudaMem*BatchAsync) for `ranges`.
  struct Batch {
    std::vector<void*> ptrs;
    std::vector<size_t> sizes;
    explicit Batch(const std::vector<Range>& ranges);
  };
  // The whole residency pages inside `r` (empty when it owns none): only those move without taking a neighbour's
  // bytes along.
  Range OwnedPages(const Range& r) const;
  // What a recompute output redirected to scratch takes there: its bytes in whole pages (a slot owns its pages).
  uint64_t ScratchBytes(trace::BufferId b) const;
  // The scratch slots of a recompute's redirected outputs, in whole pages.
  std::vector<Range> ScratchOf(const std::vector<std::pair<trace::BufferId, uint64_t>>& redirected) const;
  // The copy path: `kind`'s move of each range after `waits`; an event of the executor's that completes with them.
  enum class ResidencyMove : uint8_t { kEvict, kFetch, kDrop, kDiscard, kMake };  // kDiscard: a held drop
  cudaEvent_t ResidencyMoveLocked(ResidencyMove kind, const std::vector<cudaEvent_t>& waits,
                                  const std::vector<Range>& ranges);

  bool EnsureStreamsLocked();
  cudaEvent_t EventLocked();
  cudaEvent_t RecordLocked(StreamKey stream);
  // Work given to `then` from now on runs after everything given to `first` so far (an event recorded on `first`,
  // waited for by `then`); false when either call failed.
  bool OrderLocked(StreamKey first, cudaStream_t then);
  void StartIterationLocked(uint64_t n);
  // Which iteration op number n belongs to, for allocation tracking: each marker starts a new count (positions
  // restart there), so that iterations stay distinct when every one starts at position 0 of a new base.
  uint64_t IterationIndex(uint64_t n, uint64_t base, uint32_t period) const {
    return (marks_ << 32) | ((n - base) / period);
  }
  // Allocations are counted per iteration (the first allocation, or the start, of an iteration resets them).
  void TrackAllocationsLocked(const ReplayProgram& p, uint64_t iteration);
  void MeasureLocked(bool final);
  // Once enough moves are timed: the rates (link_), and TakeLinkMeasured() says so.
  void CheckLinkLocked();
  // Samples cudaMemGetInfo for the run's peak and, where the program's bytes for the op at `pos` are known
  // (`pos` < period), for the iteration's residency against the plan.
  void SampleDeviceLocked(uint32_t pos);
  // Where buffer b is now; false when its allocation is not live in this iteration.
  bool AddressLocked(trace::BufferId b, Range* r) const;
  // The range a prefetch, eviction or discard of b covers: its bytes, or its arena block's whole pages.
  bool MoveRangeLocked(trace::BufferId b, Range* r) const;
  bool Movable(trace::BufferId b) const;
  // Issues entry k of the program's `after` lists, anchored on an event recorded now on `stream`: evictions and
  // discards at once, prefetches through the deferred queue.
  void IssueLocked(uint32_t k, StreamKey stream);
  // Whether the room entry k's prefetches count on has been freed.
  bool RoomLocked(uint32_t k) const;
  // Issues deferred prefetch batches in order while their room is there, and up to the one holding
  // `needed_action` (a swap-in an op is about to wait for) regardless.
  void IssueDeferredLocked(uint32_t needed_action);
  // Prefetches `ranges` to `loc` on `s`: one batched call where allowed (`batch`), else one call per range. Uses
  // nothing of the executor's state (mover threads call it).
  static void PrefetchRanges(const CudaApi& api, const std::vector<Range>& ranges, cudaStream_t s,
                             cudaMemLocation loc, bool batch);
  void PrefetchLocked(const std::vector<Range>& ranges, cudaStream_t s, bool to_device);
  // Prefetches `ranges` to the device (or evicts them to the host) on `s` after `waits`, counts their bytes as
  // prefetched (evicted), and returns an event recorded after them: on this thread, or queued on the mover's lane
  // for `s` when there is a mover (the event is recorded once that job has run: ReadyLocked).
  cudaEvent_t MoveLocked(cudaStream_t s, const std::vector<cudaEvent_t>& waits, std::vector<Range> ranges,
                         bool to_device);
  // Before this thread uses an event a mover job records: waits until the job has run.
  void ReadyLocked(cudaEvent_t e);
  // Pages whose values are dead (a recompute's discarded targets, its scratch) made resident on the device without
  // a transfer, with one discard-and-prefetch call: on an H100 the kernels writing discarded pages after a batched
  // prefetch of them ran 178x slower than on resident pages, after the combined call at full speed
  // (docs/gpu-results.md, tests/gpu/um_costs.cu).
  void PopulateLocked(const std::vector<Range>& ranges, cudaStream_t s);
  // One cudaMemDiscardBatchAsync of `ranges` on `s`; false when it was not made.
  bool DiscardLocked(const std::vector<Range>& ranges, cudaStream_t s);
  // One cudaMemDiscardAndPrefetchBatchAsync of `ranges` to the device on `s`; false when it was not made (no such
  // call, the legacy stream, or an error).
  bool DiscardAndPrefetchLocked(const std::vector<Range>& ranges, cudaStream_t s);
  void RunRecomputeLocked(uint32_t r, StreamKey stream);
  // Where a recompute's buffers are: scratch for outputs the application has freed (`redirected`, each with its
  // scratch address). Empty when they are placed, else why not (an input is gone).
  std::string PlaceLocked(const ReplayProgram::Recompute& rc,
                          std::vector<std::pair<trace::BufferId, uint64_t>>* redirected);
  // Issues the recompute's launches. A launch captured in this iteration holds this iteration's pointers; a
  // recorded one the recording's. Each launch's pointers into its own buffers are mapped to where they are now
  // (scratch for freed outputs): per launch, since one address may name different buffers at different times.
  // `populate`, when given, holds per launch the ranges to populate on `stream` just before it.
  bool RelaunchLocked(const ReplayProgram::Recompute& rc,
                      const std::vector<std::pair<trace::BufferId, uint64_t>>& redirected,
                      const std::vector<std::vector<Range>>* populate, cudaStream_t stream);
  void ValidateLocked(uint32_t r, StreamKey stream);
  void DivergeLocked();

  const CudaApi& api_;
  live::Stats* stats_;
  mutable std::mutex mu_;
  std::atomic<bool> armed_{false};
  std::atomic<uint8_t> request_{0};
  std::atomic<bool> link_measured_{false};
  std::atomic<uint64_t> peak_device_{0};

  std::shared_ptr<const ReplayProgram> prog_;     // running
  std::shared_ptr<const ReplayProgram> pending_;  // installed, waiting for an iteration start
  bool idle_ = false;                             // prog_ moves nothing (ReplayProgram::Idle)
  uint64_t base_ = 0;
  uint64_t marks_ = 0;  // explicit iteration markers seen (OnMarker)
  int device_ = 0;
  cudaStream_t in_ = nullptr, out_ = nullptr, aux_ = nullptr;
  bool streams_failed_ = false;

  // This iteration.
  bool running_ = false;  // a program runs in this iteration (not diverged)
  uint32_t last_done_ = kNoPosition;  // the last position whose op was launched successfully
  bool diverged_ = false;
  uint64_t iteration_ = 0;
  uint64_t alloc_iteration_ = UINT64_MAX;
  // An iteration whose first allocations may have come before there was a program to count them: where its
  // allocations are is unknown.
  uint64_t untrusted_iteration_ = UINT64_MAX;
  uint32_t ordinal_ = 0;
  std::vector<uint64_t> alloc_base_;  // per ordinal: where this iteration's allocation is (0: not yet)
  std::vector<bool> alloc_freed_;
  std::vector<cudaEvent_t> prefetched_;  // per plan action: the swap-in's completion event, when issued
  std::vector<cudaEvent_t> evicted_;     // per buffer: its last eviction's completion event
  std::vector<uint8_t> away_;            // per buffer: moved off the device by the executor
  std::vector<bool> discarded_for_;      // per recompute: its targets were discarded this iteration
  uint32_t divergent_streak_ = 0;
  uint32_t replayed_ = 0;       // iterations of the running program started so far
  uint32_t peak_position_ = 0;  // where the program plans the most device bytes (residency is sampled there)
  Residency sampled_;           // the running iteration's samples
  Residency steady_;            // of the steady iterations that ended (steady_residency)
  uint32_t rerecord_requests_ = 0;

  struct Deferred {
    uint32_t k = 0;               // entry of `after`
    cudaEvent_t anchor = nullptr;
  };
  std::deque<Deferred> deferred_;        // prefetch batches waiting for room
  std::vector<Relaunch> launches_;       // per op: this iteration's launch (ops some recompute re-runs)
  std::vector<bool> fresh_;              // per op: launches_ was captured in this iteration

  // Across iterations of one program.
  std::vector<Check> checks_;            // per recompute
  // Verdicts of the checks, kept across the programs of one recording (cleared by Uninstall, which a new recording
  // follows): a recompute with the same launches, before the same op, with the same targets and scratch outputs
  // sees the same input values whatever the plan around it (a plan moves values, never changes them), so a program
  // that has it again (Planner II's, one planned for the measured link, the plan a trial went back to) does not
  // check it again. Keyed by VerdictKey.
  std::map<std::vector<uint64_t>, Check> verdicts_;
  static std::vector<uint64_t> VerdictKey(const ReplayProgram& p, const ReplayProgram::Recompute& rc);
  // Across programs: ops of rejected recomputes (a new plan leaves them out).
  std::vector<bool> rejected_ops_;

  // Scratch for redirected recompute outputs.
  uint64_t scratch_ = 0, scratch_bytes_ = 0;
  bool batch_moves_ = true;
  std::array<CallKindStats, kCallKinds> calls_;  // before mover_: its jobs count here until it is destroyed
  std::unique_ptr<Mover> mover_;  // KARMA_MOVE_THREADS
  ::karma::rt::Residency* residency_ = nullptr;  // the copy path (SetResidency); null: managed memory
  uint64_t page_ = kResidencyPage;  // what moves at a time: the residency's granule on the copy path
  // Events a mover job records, with the job (entries of jobs known to have run are dropped).
  std::unordered_map<cudaEvent_t, Mover::Ticket> recorded_by_;
  // The mover's last jobs when the previous iteration started: they have run before that iteration's events are
  // measured and recycled.
  std::array<Mover::Ticket, Mover::kLanes> posted_before_{};

  // Events: those of the current and the previous iteration are in use; older ones are recycled.
  std::vector<cudaEvent_t> free_events_, used_events_, measured_events_;
  cudaEvent_t iteration_start_ = nullptr;
  struct Stall {
    cudaEvent_t waiting = nullptr, ready = nullptr;
  };
  std::vector<Stall> stalls_, stalls_to_measure_;
  cudaEvent_t busy_from_ = nullptr, busy_to_ = nullptr;
  // Timed moves (LinkRates): this iteration's, and the last iteration's, measured at the next start.
  struct Transfer {
    cudaEvent_t started = nullptr, done = nullptr;
    uint64_t bytes = 0;
    bool to_device = false;
  };
  std::vector<Transfer> transfers_, transfers_to_measure_;
  bool link_timing_ = false;        // this iteration's moves are timed
  bool link_to_measure_ = false;    // transfers_to_measure_ comes from a timed iteration
  bool link_done_ = false;          // link_ is final
  std::array<uint64_t, 2> link_bytes_{};  // [to the device, to the host]
  std::array<double, 2> link_ns_{};
  uint32_t link_iterations_ = 0;
  LinkRates link_;
  // Program times (ProgramTime): which program ran an iteration, its replay number, whether it ran the plan to
  // the end; the iteration that busy_from_/busy_to_ span carries busy_tag_.
  struct IterationTag {
    uint64_t serial = 0;
    uint32_t replayed = 0;
    bool whole = false;
  };
  IterationTag busy_tag_;
  uint64_t serial_ = 0;
  std::vector<double> program_ns_;
};

}  // namespace karma::rt
