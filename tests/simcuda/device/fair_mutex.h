// The device's lock, taken in the order threads ask for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace simcuda {

// A ticket lock: calls reach the device in the order they arrive. Work runs under the device's lock as it is
// enqueued (kernels on the CPU, for milliseconds), so with an unfair mutex a thread that calls again at once (an
// application launching kernel after kernel) could keep another thread's call (a mover's eviction) waiting for many
// kernels, and when that call lands would depend on the scheduler; with tickets it lands after the call in progress.
class FairMutex {
 public:
  void lock() {
    std::unique_lock l(mu_);
    const uint64_t ticket = next_++;
    turn_.wait(l, [&] { return serving_ == ticket; });
  }
  void unlock() {
    {
      std::lock_guard l(mu_);
      ++serving_;
    }
    turn_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable turn_;
  uint64_t next_ = 0;
  uint64_t serving_ = 0;
};

}  // namespace simcuda
