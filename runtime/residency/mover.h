// Managed-memory moves issued from threads of KARMA's own (KARMA_MOVE_THREADS=1), so that a call which blocks its
// caller for the transfer holds up neither the application's launches nor the other direction's moves.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "runtime/base/worker.h"

namespace karma::rt {

// One thread per lane (the executor uses one for prefetches, one for evictions). A lane runs its jobs in the
// order they were posted; a job may name jobs of other lanes that must have run before it starts (it waits for
// events they record). Whoever uses what a job produces (an event it records) waits for its ticket first: an
// event not yet recorded reads as complete and orders nothing.
class Mover {
 public:
  static constexpr int kLanes = 2;
  struct Ticket {
    int lane = -1;  // -1: no job (already issued, or issued inline)
    uint64_t seq = 0;
  };

  Mover() = default;
  ~Mover() { Drain(); }
  Mover(const Mover&) = delete;
  Mover& operator=(const Mover&) = delete;

  // Queues `job` on `lane` after the jobs in `after`; runs it on the calling thread when the lane's thread cannot
  // start (then it has run when Post returns).
  Ticket Post(int lane, std::vector<Ticket> after, std::function<void()> job);
  // Returns once the job has run (at once for a job of no lane).
  void Wait(Ticket t);
  bool Ran(Ticket t);
  // The latest job posted on each lane.
  std::array<Ticket, kLanes> Last();
  // Waits until every posted job has run and stops the threads (a later Post starts them again).
  void Drain();
  // After fork() the child has no mover threads: forget them without joining.
  void AbandonAfterFork();

 private:
  void MarkRun(int lane, uint64_t seq);

  std::array<Worker, kLanes> lanes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::array<uint64_t, kLanes> posted_{};
  std::array<uint64_t, kLanes> run_{};
};

}  // namespace karma::rt
