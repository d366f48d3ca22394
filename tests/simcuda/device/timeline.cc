// Earliest-fit placement of operations on an engine's busy intervals.
#include "device/timeline.h"

#include <algorithm>
#include <iterator>

namespace simcuda {
namespace {
// Bounds the interval map of a program that never synchronizes: past this, the oldest intervals are merged
// into one busy block (no later operation can be placed in the gaps between them).
constexpr size_t kMaxIntervals = 1 << 16;
}  // namespace

double Engine::Reserve(double ready, double duration) {
  busy_ += duration;
  if (duration <= 0) return ready;
  double start = ready;
  // The interval that may cover `ready`, then every later gap in order.
  auto it = busy_at_.upper_bound(ready);
  if (it != busy_at_.begin()) {
    auto prev = std::prev(it);
    start = std::max(start, prev->second);
  }
  for (; it != busy_at_.end(); ++it) {
    if (start + duration <= it->first) break;
    start = std::max(start, it->second);
  }
  busy_at_.emplace(start, start + duration);
  last_end_ = std::max(last_end_, start + duration);
  if (busy_at_.size() > kMaxIntervals) MergeOldest();
  return start;
}

void Engine::Forget(double horizon) {
  auto it = busy_at_.begin();
  while (it != busy_at_.end() && it->second <= horizon) it = busy_at_.erase(it);
}

void Engine::MergeOldest() {
  auto last = busy_at_.begin();
  std::advance(last, busy_at_.size() / 2);
  const double start = busy_at_.begin()->first;
  double end = 0;
  for (auto it = busy_at_.begin(); it != last; ++it) end = std::max(end, it->second);
  busy_at_.erase(busy_at_.begin(), last);
  busy_at_.emplace(start, end);
}

}  // namespace simcuda
