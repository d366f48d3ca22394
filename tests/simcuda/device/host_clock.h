// Each host thread's position on the virtual clock: what its calls cost it, and what they wait for.
#pragma once

#include <thread>
#include <unordered_map>

namespace simcuda {

// A thread's clock starts, at its first call, at the latest clock of the threads before it, and advances by the
// host time of its calls and by its waits. Threads see each other's time only through the device (streams,
// events, blocking calls): two threads handing work over through a lock of their own keep their own clocks.
// Not thread-safe: the device's lock guards it. A thread that exits leaves (ThreadExited), so that it holds
// nobody's earliest time back; what it did before still counts in the latest time.
class HostClocks {
 public:
  // The calling thread's clock.
  double Now();
  // Advances the calling thread's clock to `t` (no earlier than it is).
  void WaitUntil(double t);
  // The calling thread spends `seconds` in a call.
  void Spend(double seconds) { Now(); clocks_[std::this_thread::get_id()] += seconds; }
  // The earliest clock of any thread: no thread can enqueue work ready before it.
  double Earliest() const;
  // The latest clock of any thread, those that have exited included.
  double Latest() const;
  void ThreadExited(std::thread::id id);

 private:
  std::unordered_map<std::thread::id, double> clocks_;
  double exited_ = 0;  // the latest clock of the threads that have exited
};

}  // namespace simcuda
