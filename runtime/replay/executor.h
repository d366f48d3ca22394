// The replay executor: runs a compiled plan alongside the application, issuing prefetches, evictions, discards
// and recomputes on its own streams, ordered against the application's streams with events.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ground/common/live_stats.h"
#include "ground/common/managed_pages.h"
#include "runtime/base/cuda_api.h"
#include "runtime/observe/ops.h"
#include "runtime/replay/iteration_allocations.h"
#include "runtime/replay/meter.h"
#include "runtime/replay/recompute_state.h"
#include "runtime/replay/replay_program.h"
#include "runtime/residency/managed_residency.h"
#include "runtime/residency/residency.h"

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
// hits (complete when needed) and misses; stalls, iteration times, the host link and device residency come from
// ReplayMeter (meter.h), the time the managed-memory calls hold their threads from ManagedResidency
// (runtime/residency/managed_residency.h).
//
// Locking: mu_ guards the executor's state. Functions named *Locked run under it, and so do the functions of the
// objects the executor keeps its parts in (meter_, the residency, allocations_, recomputes_), but those that say
// otherwise.
class Executor {
 public:
  static constexpr uint32_t kNoPosition = UINT32_MAX;

  Executor(const CudaApi& api, live::Stats* stats);
  ~Executor();
  // Prefetches and evictions that leave together go in one batched call (default), or one call per range
  // (KARMA_BATCH_MOVES=0).
  void SetBatchMoves(bool on);
  // Prefetches and evictions are issued from two threads of the executor's own (one per direction) instead of
  // inside the application's launch (KARMA_MOVE_THREADS=1): on an H100 a batched move blocked its caller for the
  // transfer. Set before the first program is installed.
  void SetMoveThreads(bool on);
  // The plan's moves (evictions, fetches, drops of dead values, device memory for recompute targets and new
  // allocations) go through a residency (runtime/residency/residency.h): the executor's own ManagedResidency, or
  // `residency` (the copy path, which owns the device memory) once set. Set before the first program is installed;
  // no mover threads on the copy path.
  void SetResidency(::karma::rt::Residency* residency);
  // After fork() in the child: the mover threads do not exist there.
  void AbandonAfterFork();
  // Where the statistics go (the live view's segment once it exists).
  void SetStats(live::Stats* stats);
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
  // An installed program waits for an iteration start.
  bool pending() const;

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

  // Data parallel (libkarma_mpi.so's memory hooks, runtime/session/data_parallel_memory.h), from any thread: the
  // whole residency pages of [addr, addr + bytes) leave the device (or come back) through the residency, after what
  // it was given before; `done` (the caller's event, or null) is recorded once they have. False when nothing was to
  // move (the range owns no whole page): `done` is not recorded.
  bool MoveForHost(uint64_t addr, uint64_t bytes, bool to_device, cudaEvent_t done);
  // Whether the program running (or waiting to start) homes a buffer at `addr` on the host and swaps it in before the
  // iteration's first use of it: the host's updates to it need no move of their own.
  bool PlanBringsBack(uint64_t addr) const;

  // What the session must do: nothing, record again (repeated divergence), or plan again without the ops of
  // rejected recomputes (rejected_ops()).
  enum class Request : uint8_t { kNone = 0, kRerecord = 1, kReplan = 2 };
  Request TakeRequest() { return static_cast<Request>(request_.exchange(0, std::memory_order_acq_rel)); }
  // With kRerecord: the period of the program that kept diverging (not the iteration, for detection).
  uint64_t diverged_period() const;
  std::vector<bool> rejected_ops() const;
  // The host link as the plan's moves found it (LinkMeter): the session plans again with rates that depart from
  // its profile's.
  using LinkRates = LinkMeter::Rates;
  static constexpr uint64_t kLinkMinBytes = LinkMeter::kMinBytes;
  static constexpr uint32_t kLinkMinIterations = LinkMeter::kMinIterations;
  static constexpr uint32_t kLinkMaxIterations = LinkMeter::kMaxIterations;
  LinkRates link_rates() const;
  // True once, when link_rates() has become final with a rate measured.
  bool TakeLinkMeasured() { return meter_.link().TakeMeasured(); }
  // The running program's steady iteration time (ReplayMeter::ProgramTime).
  using ProgramTime = ReplayMeter::ProgramTime;
  static constexpr uint32_t kTimedFrom = ReplayMeter::kTimedFrom;
  ProgramTime program_time() const;
  // Measurements of iterations that have completed; called at shutdown for the last ones.
  void Flush();
  uint64_t peak_device_bytes() const { return meter_.peak_device_bytes(); }
  // Device residency in steady replayed iterations (ReplayMeter::Residency).
  using Residency = ReplayMeter::Residency;
  Residency steady_residency() const;
  // The managed-memory calls per replayed iteration by kind, with the wall time they held their threads (empty
  // before a replay): for the log at exit.
  std::string CallsLine() const;
  std::string program_summary() const;

 private:
  using Range = ResidencyRange;
  // The whole residency pages inside `r` (empty when it owns none): only those move without taking a neighbour's
  // bytes along.
  Range OwnedPages(const Range& r) const;
  // What a recompute output redirected to scratch takes there: its bytes in whole pages (a slot owns its pages).
  uint64_t ScratchBytes(trace::BufferId b) const;
  // The scratch slots of a recompute's redirected outputs, in whole pages.
  std::vector<Range> ScratchOf(const std::vector<std::pair<trace::BufferId, uint64_t>>& redirected) const;
  // The pages of `ranges` a residency moves: as they are for managed memory, only whole pages a range owns on the
  // copy path.
  std::vector<ResidencyRange> PagesLocked(const std::vector<Range>& ranges) const;
  // Device memory for `ranges` before work on stream `s` writes them: the copy path makes them at once (the
  // residency orders each page's make after the last use of its old value) and `s` waits for it; managed memory
  // populates them in `s`'s order, without a transfer (ManagedResidency::Make).
  void MakeForLocked(const std::vector<Range>& ranges, cudaStream_t s);
  // The values in `ranges` are dead once `after` has completed (`held`: to be rebuilt); `user` may use the pages
  // again later.
  void DropLocked(cudaEvent_t after, const std::vector<Range>& ranges, bool held, cudaStream_t user);
  // The residency the meter samples device bytes from: the copy path's (it owns the device memory), else none
  // (cudaMemGetInfo).
  const ::karma::rt::Residency* OwnedLocked() const { return owned_ ? residency_ : nullptr; }
  // An event of the meter's pool.
  cudaEvent_t EventLocked() { return meter_.Event(); }
  cudaEvent_t RecordLocked(StreamKey stream);
  // At op number n, position 0 of an iteration: ends the last iteration, starts a pending program, and issues what
  // the plan issues at the start.
  void StartIterationLocked(uint64_t n);
  // Ends the running iteration (its time, its residency samples, divergence in a row, the actions anchored after
  // its last op); false when repeated divergence stops the replay for a new recording.
  bool EndIterationLocked(ReplayMeter::IterationTag* ended);
  // The pending program runs from this iteration on.
  void StartProgramLocked();
  // Which iteration op number n belongs to, for allocation tracking: each marker starts a new count (positions
  // restart there), so that iterations stay distinct when every one starts at position 0 of a new base.
  uint64_t IterationIndex(uint64_t n, uint64_t base, uint32_t period) const {
    return (marks_ << 32) | ((n - base) / period);
  }
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
  // Fetches `ranges` to the device (or evicts them to the host) after `waits`, counts their bytes as prefetched
  // (evicted), and returns an event recorded after them (null: nothing was moved). Before this thread uses the
  // event, Residency::Recorded (a managed move may be issued by a mover thread).
  cudaEvent_t MoveLocked(const std::vector<cudaEvent_t>& waits, const std::vector<Range>& ranges, bool to_device);
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

  // Recompute validation ("Recompute validation" above): a buffer's bytes copied to the host.
  struct BufferCopy {
    trace::BufferId b = trace::kNone;
    Range r;
    std::vector<unsigned char> bytes;
  };
  void ValidateLocked(uint32_t r, StreamKey stream);
  // Rejects recompute r for `why` and asks the session for a new plan.
  void RejectLocked(uint32_t r, const std::string& why);
  // Copies every buffer recompute `rc` uses but the redirected ones to the host, synchronously on `s`; false
  // when a copy failed.
  bool CopyOutLocked(const ReplayProgram::Recompute& rc,
                     const std::vector<std::pair<trace::BufferId, uint64_t>>& redirected, cudaStream_t s,
                     LastErrorScope& errors, std::vector<BufferCopy>* copies) const;
  // Overwrites what a discard destroys in steady state (a target's bytes in the whole pages of its move range)
  // with the complement of its value, from host bytes kept in `poison` until the stream has synchronized; false
  // when a write failed.
  bool PoisonLocked(const ReplayProgram::Recompute& rc, const std::vector<BufferCopy>& copies, cudaStream_t s,
                    LastErrorScope& errors, std::vector<std::vector<unsigned char>>* poison) const;
  // Whether every buffer holds its copy's bytes again.
  bool SameLocked(const std::vector<BufferCopy>& copies, cudaStream_t s, LastErrorScope& errors) const;

  void DivergeLocked();

  const CudaApi& api_;
  live::Stats* stats_;
  mutable std::mutex mu_;
  std::atomic<bool> armed_{false};
  std::atomic<uint8_t> request_{0};

  std::shared_ptr<const ReplayProgram> prog_;     // running
  std::shared_ptr<const ReplayProgram> pending_;  // installed, waiting for an iteration start
  bool idle_ = false;                             // prog_ moves nothing (ReplayProgram::Idle)
  uint64_t base_ = 0;
  uint64_t marks_ = 0;  // explicit iteration markers seen (OnMarker)

  // This iteration.
  bool running_ = false;  // a program runs in this iteration (not diverged)
  uint32_t last_done_ = kNoPosition;  // the last position whose op was launched successfully
  bool diverged_ = false;
  IterationAllocations allocations_;
  std::vector<cudaEvent_t> prefetched_;  // per plan action: the swap-in's completion event, when issued
  std::vector<cudaEvent_t> evicted_;     // per buffer: its last eviction's completion event
  std::vector<uint8_t> away_;            // per buffer: moved off the device by the executor
  struct Deferred {
    uint32_t k = 0;               // entry of `after`
    cudaEvent_t anchor = nullptr;
  };
  std::deque<Deferred> deferred_;        // prefetch batches waiting for room
  struct Divergence {
    uint32_t streak = 0;     // replayed iterations in a row that diverged
    uint32_t rerecords = 0;  // recordings asked for
    uint64_t period = 0;     // the period of the program the last one replaced
  } divergence_;

  RecomputeState recomputes_;
  Range scratch_;  // for redirected recompute outputs, never freed (cudaFree syncs)
  ReplayMeter meter_;
  std::unique_ptr<ManagedResidency> managed_;  // the managed path's calls and mover threads
  ::karma::rt::Residency* residency_;          // managed_, or the copy path's (SetResidency)
  bool owned_ = false;                          // residency_ is the copy path's: it owns the device memory
  uint64_t page_ = kResidencyPage;              // what moves at a time: the residency's granule
};

}  // namespace karma::rt
