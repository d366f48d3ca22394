// The replay's measurements from CUDA events and cudaMemGetInfo: stalls, iteration times, the host link's rates,
// device residency; and the pool of events the executor orders its work with, recycled once measured.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "ground/common/live_stats.h"
#include "runtime/base/cuda_api.h"
#include "runtime/replay/replay_program.h"
#include "runtime/residency/residency.h"

namespace karma::rt {

// The host link as the plan's moves found it: per direction, the bytes the plan's prefetches (to the device) or
// evictions (to the host) moved over the time from each move's start on its stream to its completion (CUDA
// events), summed over replayed iterations from the second of each program on, until each direction that moves
// has moved enough to tell (kMinBytes; kMaxIterations at most). Measured once per process; a rate is 0 where too
// little moved that way.
//
// Not thread-safe: the executor calls it under its lock (Executor::mu_), except TakeMeasured.
class LinkMeter {
 public:
  struct Rates {
    double h2d_bw = 0, d2h_bw = 0;  // bytes/s
    uint64_t h2d_bytes = 0, d2h_bytes = 0;
    uint32_t iterations = 0;
  };
  static constexpr uint64_t kMinBytes = 16ull << 20;
  static constexpr uint32_t kMinIterations = 2, kMaxIterations = 8;
  // A move timed from when its stream starts it (after its waits and the moves before it) to its completion.
  struct Transfer {
    cudaEvent_t started = nullptr, done = nullptr;
    uint64_t bytes = 0;
    bool to_device = false;
  };

  // Whether this iteration's moves are timed (Add).
  bool timing() const { return timing_; }
  void Add(const Transfer& t) { transfers_.push_back(t); }
  // Adds the last iteration's timed moves to the totals (and, when `final`, this iteration's: nothing ends it).
  void Measure(const CudaApi& api, LastErrorScope& errors, bool final);
  // Once enough moves are timed: the rates, and TakeMeasured() says so.
  void Check();
  // At an iteration start: the iteration that ended is measured at the next one.
  void NextIteration();
  // Whether the iteration that starts now has its moves timed (never once the rates are final).
  void TimeIteration(bool on) { timing_ = on && !done_; }
  Rates rates() const { return done_ ? rates_ : Rates{}; }
  // True once, when rates() has become final with a rate measured. Without the executor's lock.
  bool TakeMeasured() {
    return measured_.load(std::memory_order_relaxed) && measured_.exchange(false, std::memory_order_acq_rel);
  }

 private:
  // Timed moves: this iteration's, and the last iteration's, measured at the next start.
  std::vector<Transfer> transfers_, transfers_to_measure_;
  bool timing_ = false;        // this iteration's moves are timed
  bool to_measure_ = false;    // transfers_to_measure_ comes from a timed iteration
  bool done_ = false;          // rates_ is final
  std::array<uint64_t, 2> bytes_{};  // [to the device, to the host]
  std::array<double, 2> ns_{};
  uint32_t iterations_ = 0;
  Rates rates_;
  std::atomic<bool> measured_{false};
};

// Stalls (for each prefetch an op waited for and that was not complete, the time from when the waiting stream
// would have started the op to the prefetch's completion), iteration times between iteration starts on the
// application's stream, the program's steady iteration time, the host link (LinkMeter), and device residency
// sampled with cudaMemGetInfo from the second replayed iteration of a program on. Events are those of the current
// and the previous iteration in use; older ones are measured, then recycled.
//
// Not thread-safe: the executor calls it under its lock (Executor::mu_), except peak_device_bytes.
class ReplayMeter {
 public:
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
  // Which program ran an iteration, its replay number, whether it ran the plan to the end.
  struct IterationTag {
    uint64_t serial = 0;
    uint32_t replayed = 0;
    bool whole = false;
  };

  explicit ReplayMeter(const CudaApi& api) : api_(api) {}
  ReplayMeter(const ReplayMeter&) = delete;
  ReplayMeter& operator=(const ReplayMeter&) = delete;

  // An event of the pool (nullptr when none could be created), in use until two iteration starts from now.
  cudaEvent_t Event();
  // An op's stream waits from `waiting` for a prefetch that completes at `ready`.
  void Stall(cudaEvent_t waiting, cudaEvent_t ready) { stalls_.push_back({waiting, ready}); }
  LinkMeter& link() { return link_; }
  const LinkMeter& link() const { return link_; }

  // At an iteration start: the tag of the iteration that ends (`whole`: it ran the plan to the end), whose
  // residency samples count as steady when it was.
  IterationTag EndIteration(bool whole);
  // A new program runs from this iteration on.
  void StartProgram(const ReplayProgram& p);
  // A new recording replaces the programs: steady residency starts again with the next one's.
  void ForgetResidency() { steady_ = Residency{}; }
  // At every iteration start, replayed or not: measures the iteration before the last and recycles its events.
  void NextIteration(live::Stats& stats);
  // A replayed iteration starts at `start` (an event on the application's stream), after the iteration `ended`.
  // `residency`: the copy path's (null: managed memory), whose moves are not timed.
  void StartReplayedIteration(cudaEvent_t start, const IterationTag& ended, const ReplayProgram& p,
                              const ::karma::rt::Residency* residency);
  // Samples the device right before the op at `pos` is launched, once what the plan issues for it has been issued
  // (the plan's bytes at `pos` count the evictions and discards anchored after the op before as done), from the
  // program's second replayed iteration on: where the program issues something (`issued`), or plans the most.
  void SampleBefore(uint32_t pos, const ReplayProgram* p, const ::karma::rt::Residency* residency, bool issued) {
    if (replayed_ > 1 && (issued || pos == peak_position_)) SampleDevice(pos, p, residency);
  }
  // Measures every iteration that has completed (at shutdown for the last ones).
  void Flush(live::Stats& stats);

  ProgramTime program_time(std::shared_ptr<const ReplayProgram> running) const;
  Residency steady_residency() const { return steady_; }
  // Without the executor's lock.
  uint64_t peak_device_bytes() const { return peak_device_.load(std::memory_order_relaxed); }

 private:
  struct StallEvents {
    cudaEvent_t waiting = nullptr, ready = nullptr;
  };
  // Samples cudaMemGetInfo for the run's peak and, where the program's bytes for the op at `pos` are known
  // (`pos` < period), for the iteration's residency against the plan.
  void SampleDevice(uint32_t pos, const ReplayProgram* p, const ::karma::rt::Residency* residency);
  void Measure(live::Stats& stats, bool final);

  const CudaApi& api_;
  std::vector<cudaEvent_t> free_events_, used_events_, measured_events_;
  cudaEvent_t iteration_start_ = nullptr;
  std::vector<StallEvents> stalls_, stalls_to_measure_;
  // The iteration that busy_from_/busy_to_ span carries busy_tag_.
  cudaEvent_t busy_from_ = nullptr, busy_to_ = nullptr;
  IterationTag busy_tag_;
  uint64_t serial_ = 0;        // of the running program
  uint32_t replayed_ = 0;      // iterations of the running program started so far
  uint32_t peak_position_ = 0;  // where the program plans the most device bytes (residency is sampled there)
  std::vector<double> program_ns_;  // the running program's timed iterations
  Residency sampled_;          // the running iteration's samples
  Residency steady_;           // of the steady iterations that ended (steady_residency)
  std::atomic<uint64_t> peak_device_{0};
  LinkMeter link_;
};

}  // namespace karma::rt
