// The executor's mover threads.
#include "runtime/residency/mover.h"

#include <algorithm>
#include <utility>

namespace karma::rt {

Mover::Ticket Mover::Post(int lane, std::vector<Ticket> after, std::function<void()> job) {
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = ++posted_[lane];
  }
  auto run = [this, lane, seq, after = std::move(after), job = std::move(job)] {
    for (const Ticket& t : after) Wait(t);
    job();
    MarkRun(lane, seq);
  };
  if (!lanes_[lane].Post(run)) {
    Wait(Ticket{lane, seq - 1});  // the lane's earlier jobs first, as its thread would have run them
    run();
  }
  return Ticket{lane, seq};
}

void Mover::MarkRun(int lane, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  run_[lane] = std::max(run_[lane], seq);
  cv_.notify_all();
}

void Mover::Wait(Ticket t) {
  if (t.lane < 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return run_[t.lane] >= t.seq; });
}

bool Mover::Ran(Ticket t) {
  if (t.lane < 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  return run_[t.lane] >= t.seq;
}

std::array<Mover::Ticket, Mover::kLanes> Mover::Last() {
  std::lock_guard<std::mutex> lock(mu_);
  std::array<Ticket, kLanes> last;
  for (int l = 0; l < kLanes; ++l) last[l] = Ticket{l, posted_[l]};
  return last;
}

void Mover::Drain() {
  for (Worker& w : lanes_) w.Drain();
}

void Mover::AbandonAfterFork() {
  for (Worker& w : lanes_) w.AbandonAfterFork();
}

}  // namespace karma::rt
