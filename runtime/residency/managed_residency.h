// The `managed` residency, the paper's path: the application's memory is CUDA managed memory and moves by the
// driver's prefetches (to the host: eviction) and discards, issued on streams of the residency's own, from the
// calling thread or from mover threads (KARMA_MOVE_THREADS=1), with the wall time each kind of call holds its thread.
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
#include "runtime/residency/residency.h"

namespace karma::rt {

// Each call adds the wall time it holds its thread (the caller's threads waiting for the mover threads included)
// to its side's total in the statistics (app_move_ns, or mover_move_ns for the mover's jobs) and to its kind's
// count: on an H100 a batched move held its caller for the transfer.
//
// Moves are stream-ordered: an eviction or a fetch on the residency's own stream for its direction after `after`,
// its completion the caller's `done` event (the tickets of evictions and fetches have a seq; WaitOn, RecordDone and
// Done work through that event); a drop on a third stream, which `user` then waits for; a make in `user`'s order.
// Nothing of the device memory is the residency's: the driver decides what is resident (Resident is false, Backed
// true, the byte counts 0; cudaMemGetInfo tells).
//
// Not thread-safe: one caller at a time (the executor's lock), except SetBatch, AbandonAfterFork and CallsLine. The
// mover's jobs run on its threads and touch only what they were given and the per-kind counts.
class ManagedResidency final : public Residency {
 public:
  ManagedResidency(const CudaApi& api, live::Stats* stats) : api_(api), stats_(stats) {}
  ~ManagedResidency() override;
  ManagedResidency(const ManagedResidency&) = delete;
  ManagedResidency& operator=(const ManagedResidency&) = delete;

  // Where the counts go (the live view's segment once it exists).
  void SetStats(live::Stats* stats) { stats_ = stats; }
  // Prefetches and evictions that leave together go in one batched call (default), or one call per range.
  void SetBatch(bool on) { batch_ = on; }
  // Starts the mover threads, or drains and stops them.
  void SetThreads(bool on);
  // After fork() in the child: the mover threads do not exist there.
  void AbandonAfterFork();
  // The device prefetches go to.
  void SetDevice(int device) { device_ = device; }
  // The residency's streams (created once); false when they cannot be (no moves then).
  bool EnsureStreams();
  // A new block of the application's made resident on the device in `stream`'s order, before its first touch faults
  // each page in (one prefetch).
  void PopulateAllocation(uint64_t addr, uint64_t size, cudaStream_t stream);
  // At an iteration start: waits for the mover's jobs posted before the previous iteration started (the events
  // they record are measured and recycled from now on) and forgets those that have run.
  void StartIteration();
  // The calls per replayed iteration by kind, with the wall time they held their threads (empty before a replay):
  // for the log at exit.
  std::string CallsLine(uint64_t replayed) const;

  const char* name() const override { return "managed"; }
  uint64_t granularity() const override;
  // Managed memory every stream may use (`on_device` changes nothing: pages go where they are touched).
  Result<uint64_t> Reserve(uint64_t bytes, bool on_device = true) override;
  void Release(uint64_t addr) override;
  using Residency::Drop;
  using Residency::Evict;
  using Residency::Fetch;
  using Residency::Make;
  ResidencyTicket Evict(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                        const MoveEvents& events) override;
  ResidencyTicket Fetch(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                        const MoveEvents& events) override;
  // One cudaMemDiscardBatchAsync (nothing where the driver has no such call); `held` changes nothing.
  ResidencyTicket Drop(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after, bool held,
                       std::optional<cudaStream_t> user) override;
  // One cudaMemDiscardAndPrefetchBatchAsync on `user` (a plain prefetch where that call is missing or refuses the
  // stream): kernels writing discarded pages after a batched prefetch of them ran 178x slower on an H100 than on
  // resident pages, after the combined call at full speed (docs/gpu-results.md, tests/gpu/um_costs.cu).
  ResidencyTicket Make(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                       std::optional<cudaStream_t> user) override;
  void Recorded(cudaEvent_t event) override;
  Status WaitOn(ResidencyTicket t, cudaStream_t stream) override;
  Status RecordDone(ResidencyTicket t, cudaEvent_t event) override;
  bool Resident(ResidencyRange) const override { return false; }
  bool Backed(ResidencyRange) const override { return true; }
  bool Done(ResidencyTicket t) const override;
  // Waits until every mover job has run (every event one records is recorded).
  void Finish() override;
  // Whether every move given so far has been issued to the driver (the mover threads have run their jobs).
  bool Issued() const;
  uint64_t device_bytes() const override { return 0; }
  uint64_t live_bytes() const override { return 0; }
  uint64_t peak_device_bytes() const override { return 0; }

 private:
  enum Lane : uint32_t { kIn = 0, kOut = 1, kDead = 2, kNew = 3, kLanes = 4 };
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
    explicit Batch(std::span<const ResidencyRange> ranges);
  };
  // Prefetches `ranges` to `loc` on `s`: one batched call where allowed (`batch`), else one call per range. Uses
  // nothing of this object's state (mover threads call it).
  static void PrefetchRanges(const CudaApi& api, std::span<const ResidencyRange> ranges, cudaStream_t s,
                             cudaMemLocation loc, bool batch);
  // An eviction or a fetch: on this thread, or queued on the mover lane of its direction.
  ResidencyTicket Move(std::span<const ResidencyRange> ranges, std::span<const cudaEvent_t> after,
                       const MoveEvents& events, bool to_device);
  // One batched discard (Drop checks that the driver has the call).
  bool Discard(std::span<const ResidencyRange> ranges, cudaStream_t s);
  bool DiscardAndPrefetch(std::span<const ResidencyRange> ranges, cudaStream_t s);
  // Work given to `then` from now on runs after everything given to `first` so far.
  bool Order(cudaStream_t first, cudaStream_t then);
  // The event a move with a seq records when done (null: none was given, or it is forgotten).
  cudaEvent_t DoneEvent(ResidencyTicket t) const;

  const CudaApi& api_;
  live::Stats* stats_;
  int device_ = 0;
  bool batch_ = true;
  cudaStream_t in_ = nullptr, out_ = nullptr, aux_ = nullptr;
  bool streams_failed_ = false;
  cudaEvent_t order_ = nullptr;  // recorded on one stream for another to wait on (a wait takes the record it sees)
  std::array<uint32_t, kLanes> posted_{};
  // The `done` event of each eviction and fetch posted since the previous iteration started, by lane and seq.
  std::unordered_map<uint64_t, cudaEvent_t> done_;
  std::array<CallKindStats, kCallKinds> calls_;  // before mover_: its jobs count here until it is destroyed
  std::unique_ptr<Mover> mover_;
  // Events a mover job records, with the job (entries of jobs known to have run are dropped).
  std::unordered_map<cudaEvent_t, Mover::Ticket> recorded_by_;
  // The mover's last jobs when the previous iteration started: they have run before that iteration's events are
  // measured and recycled.
  std::array<Mover::Ticket, Mover::kLanes> posted_before_{};
};

}  // namespace karma::rt
