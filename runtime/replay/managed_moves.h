// The replay's managed-memory calls: prefetches, evictions, discards and population of address ranges, on the
// calling thread or on the mover threads (KARMA_MOVE_THREADS=1), with the wall time each kind of call holds its
// thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ground/common/live_stats.h"
#include "runtime/base/cuda_api.h"
#include "runtime/base/streams.h"
#include "runtime/residency/mover.h"

namespace karma::rt {

// [addr, addr + bytes) of the application's or the executor's memory.
struct AddressRange {
  uint64_t addr = 0, bytes = 0;
  uint64_t data = UINT64_MAX;  // the value's bytes from addr (the copy path copies no more); the rest is unused
};

// Each call adds the wall time it holds its thread (the application's threads waiting for the mover threads
// included) to its side's total in `stats` (app_move_ns, or mover_move_ns for the mover's jobs) and to its kind's
// count: on an H100 a batched move held its caller for the transfer.
//
// Not thread-safe: the executor calls it under its lock (Executor::mu_), except SetBatch, AbandonAfterFork and
// CallsLine. The mover's jobs run on its threads and touch only what they were given and the per-kind counts.
class ManagedMoves {
 public:
  explicit ManagedMoves(const CudaApi& api) : api_(api) {}
  ManagedMoves(const ManagedMoves&) = delete;
  ManagedMoves& operator=(const ManagedMoves&) = delete;

  // Prefetches and evictions that leave together go in one batched call (default), or one call per range.
  // Without the executor's lock, before a replay.
  void SetBatch(bool on) { batch_ = on; }
  // Starts the mover threads, or drains and stops them.
  void SetThreads(bool on);
  // After fork() in the child: the mover threads do not exist there. Without the executor's lock.
  void AbandonAfterFork();
  // The device prefetches go to.
  void SetDevice(int device) { device_ = device; }

  // Prefetches `ranges` to the device (or evicts them to the host) on `s`, on this thread.
  void Prefetch(live::Stats& stats, const std::vector<AddressRange>& ranges, cudaStream_t s, bool to_device);
  // Prefetches (or evicts) `ranges` on `s` after `waits`, with `started` (when given) recorded before and `done`
  // after: on this thread, or queued on mover lane `lane` when there are mover threads (the events are recorded
  // once that job has run: Ready).
  void Move(live::Stats& stats, int lane, cudaStream_t s, const std::vector<cudaEvent_t>& waits,
            std::vector<AddressRange> ranges, bool to_device, cudaEvent_t done, cudaEvent_t started);
  // Before this thread uses an event a mover job records: waits until the job has run.
  void Ready(live::Stats& stats, cudaEvent_t e);
  // One cudaMemDiscardBatchAsync of `ranges` on `s`; false when it was not made.
  bool Discard(live::Stats& stats, const std::vector<AddressRange>& ranges, cudaStream_t s);
  // One cudaMemDiscardAndPrefetchBatchAsync of `ranges` to the device on `s`; false when it was not made (no such
  // call, the legacy stream, or an error).
  bool DiscardAndPrefetch(live::Stats& stats, const std::vector<AddressRange>& ranges, cudaStream_t s);
  // A new arena block made resident on the device on `stream`'s order, before its first touch faults each page in.
  void PopulateAllocation(live::Stats& stats, uint64_t addr, uint64_t size, StreamKey stream);

  // At an iteration start: waits for the mover's jobs posted before the previous iteration started (the events
  // they record are measured and recycled from now on) and forgets those that have run.
  void StartIteration();
  // Waits until every mover job has run (every event one records is recorded).
  void Drain();
  // The calls per replayed iteration by kind, with the wall time they held their threads (empty before a replay):
  // for the log at exit. Without the executor's lock.
  std::string CallsLine(uint64_t replayed) const;

 private:
  // Kinds of managed-memory call (and the wait for a mover job), for CallsLine.
  enum CallKind : int {
    kPrefetchCall, kEvictCall, kDiscardCall, kDiscardAndPrefetchCall, kAllocationCall, kMoverWait, kCallKinds
  };
  struct CallKindStats {
    std::atomic<uint64_t> calls{0}, ns{0};
  };
  class HeldFor;
  // The pointer and size arrays of the batch calls (cudaMem*BatchAsync) for `ranges`.
  struct Batch {
    std::vector<void*> ptrs;
    std::vector<size_t> sizes;
    explicit Batch(const std::vector<AddressRange>& ranges);
  };
  // Prefetches `ranges` to `loc` on `s`: one batched call where allowed (`batch`), else one call per range. Uses
  // nothing of this object's state (mover threads call it).
  static void PrefetchRanges(const CudaApi& api, const std::vector<AddressRange>& ranges, cudaStream_t s,
                             cudaMemLocation loc, bool batch);

  const CudaApi& api_;
  int device_ = 0;
  bool batch_ = true;
  std::array<CallKindStats, kCallKinds> calls_;  // before mover_: its jobs count here until it is destroyed
  std::unique_ptr<Mover> mover_;
  // Events a mover job records, with the job (entries of jobs known to have run are dropped).
  std::unordered_map<cudaEvent_t, Mover::Ticket> recorded_by_;
  // The mover's last jobs when the previous iteration started: they have run before that iteration's events are
  // measured and recycled.
  std::array<Mover::Ticket, Mover::kLanes> posted_before_{};
};

}  // namespace karma::rt
