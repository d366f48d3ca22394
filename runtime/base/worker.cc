// The background worker thread.
#include "runtime/base/worker.h"

#include <system_error>

namespace karma::rt {

Worker::~Worker() { Drain(); }

bool Worker::Post(std::function<void()> task) {
  if (abandoned_) return false;
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return false;
  if (!started_) {
    try {
      thread_ = std::thread([this] { Run(); });
    } catch (const std::system_error&) {
      return false;
    }
    started_ = true;
  }
  tasks_.push_back(std::move(task));
  cv_.notify_one();
  return true;
}

void Worker::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

void Worker::Drain() {
  if (abandoned_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  started_ = false;
  stopping_ = false;
}

void Worker::AbandonAfterFork() {
  // The thread does not exist in the child, and the lock may have been held by it at the fork: touch neither.
  // std::thread would terminate the process if destroyed while joinable.
  abandoned_ = true;
  if (thread_.joinable()) thread_.detach();
}

}  // namespace karma::rt
