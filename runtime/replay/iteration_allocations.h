// Where this iteration's allocations are: the application's allocations matched by their order within an
// iteration to those the recording saw, so that the plan's buffers allocated inside the iteration have addresses.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/replay/replay_program.h"

namespace karma::rt {

// Allocations are counted per iteration (the first allocation, or the start, of an iteration resets them). One
// whose size is not the recorded one makes every later one of its iteration unknown.
//
// Not thread-safe: the executor calls it under its lock (Executor::mu_).
class IterationAllocations {
 public:
  // An iteration whose first allocations may have come before there was a program to count them: where its
  // allocations are is unknown.
  void Distrust(uint64_t iteration) { untrusted_ = iteration; }
  // Counts from here on for `iteration` (a new one resets the count).
  void Track(const ReplayProgram& p, uint64_t iteration);
  // The application allocated [addr, addr + size) in the tracked iteration.
  void Add(const ReplayProgram& p, uint64_t addr, uint64_t size);
  void Freed(uint64_t addr);
  // Whether the tracked iteration's allocations can be known.
  bool trusted() const { return iteration_ != untrusted_; }
  // Where allocation `ordinal` of this iteration is: 0 when not known yet, or (Live) freed.
  uint64_t Placed(uint32_t ordinal) const { return ordinal < base_.size() ? base_[ordinal] : 0; }
  uint64_t Live(uint32_t ordinal) const { return ordinal < base_.size() && !freed_[ordinal] ? base_[ordinal] : 0; }

 private:
  uint64_t iteration_ = UINT64_MAX;
  uint64_t untrusted_ = UINT64_MAX;
  uint32_t ordinal_ = 0;        // of the next allocation
  std::vector<uint64_t> base_;  // per ordinal: where this iteration's allocation is (0: not yet)
  std::vector<bool> freed_;
};

}  // namespace karma::rt
