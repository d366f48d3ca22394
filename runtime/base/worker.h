// The session's background thread: work that must not run on the application's threads (finishing a recorded
// iteration; in phase 2, planning).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace karma::rt {

// Tasks run in order on one thread, started on the first Post. Tasks must not throw (they are wrapped by the
// session). Not copyable; Drain() before destruction.
class Worker {
 public:
  Worker() = default;
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // False when the thread cannot be started (the task is dropped).
  bool Post(std::function<void()> task);
  // Waits until every posted task has run, and stops the thread.
  void Drain();
  // After fork() the child has no worker thread: forget it without joining.
  void AbandonAfterFork();

 private:
  void Run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::thread thread_;
  bool started_ = false;
  bool stopping_ = false;
  bool abandoned_ = false;  // in a forked child: the thread and maybe the lock belong to the parent
};

}  // namespace karma::rt
