// One engine of the simulated device (compute, host-to-device copy, device-to-host copy) on the virtual clock.
#pragma once

#include <cstddef>
#include <map>

namespace simcuda {

// An engine runs one operation at a time. Operations are placed in the order the host enqueues them, each at
// the earliest idle interval that starts no sooner than it is ready: work that becomes ready early fills a gap
// left before work that waits on an event (as a GPU dispatches whatever is ready).
class Engine {
 public:
  // Occupies the engine for `duration` seconds from the earliest start >= `ready`; returns that start.
  double Reserve(double ready, double duration);
  // Forgets busy intervals that end at or before `horizon`: nothing can start earlier than it any more.
  void Forget(double horizon);
  // When the last operation placed so far ends.
  double last_end() const { return last_end_; }
  double busy_seconds() const { return busy_; }
  size_t intervals() const { return busy_at_.size(); }

 private:
  void MergeOldest();

  std::map<double, double> busy_at_;  // start -> end, disjoint
  double last_end_ = 0;
  double busy_ = 0;
};

}  // namespace simcuda
