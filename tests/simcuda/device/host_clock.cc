// Per-thread virtual host clocks.
#include "device/host_clock.h"

#include <algorithm>

namespace simcuda {

double HostClocks::Now() {
  const auto id = std::this_thread::get_id();
  auto it = clocks_.find(id);
  if (it == clocks_.end()) it = clocks_.emplace(id, Latest()).first;
  return it->second;
}

void HostClocks::WaitUntil(double t) {
  const double now = Now();
  clocks_[std::this_thread::get_id()] = std::max(now, t);
}

double HostClocks::Earliest() const {
  if (clocks_.empty()) return 0;
  double t = clocks_.begin()->second;
  for (const auto& [id, c] : clocks_) t = std::min(t, c);
  return t;
}

void HostClocks::ThreadExited(std::thread::id id) {
  auto it = clocks_.find(id);
  if (it == clocks_.end()) return;
  exited_ = std::max(exited_, it->second);
  clocks_.erase(it);
}

double HostClocks::Latest() const {
  double t = exited_;
  for (const auto& [id, c] : clocks_) t = std::max(t, c);
  return t;
}

}  // namespace simcuda
