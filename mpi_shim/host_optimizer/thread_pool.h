// A small persistent pool of host threads that runs one job at a time; the calling thread is worker 0.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "ground/common/status.h"

namespace karma::hostopt {

// A non-owning reference to a callable, so that dispatching a job allocates nothing.
template <typename Sig>
class FunctionRef;
template <typename R, typename... A>
class FunctionRef<R(A...)> {
 public:
  template <typename Fn, typename = std::enable_if_t<!std::is_same_v<std::decay_t<Fn>, FunctionRef>>>
  FunctionRef(Fn&& fn)  // NOLINT: implicit by design
      : obj_(const_cast<void*>(static_cast<const void*>(&fn))),
        call_([](void* o, A... a) -> R { return (*static_cast<std::remove_reference_t<Fn>*>(o))(std::forward<A>(a)...); }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

class ThreadPool {
 public:
  // `threads` >= 1 workers in all: threads - 1 are started here and sleep between jobs.
  static Result<std::unique_ptr<ThreadPool>> Create(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(cursors_.size()); }

  // Runs fn(worker) once on every worker, the caller being worker 0, and returns when all are done.
  // One job at a time: the caller serializes Run and ParallelFor.
  void Run(FunctionRef<void(int)> fn);

  // Calls fn(item, worker) for every item in [0, n). Each worker first works through its own contiguous
  // share (the same share for the same n, which keeps first-touch placement and prefetch streams), then
  // takes the items left in the others' shares, so a worker slowed by another process does not hold
  // the job back.
  void ParallelFor(size_t n, FunctionRef<void(size_t, int)> fn);

 private:
  explicit ThreadPool(int threads);
  void WorkerLoop(int index);

  struct alignas(64) Cursor {
    std::atomic<size_t> next{0};
    size_t end = 0;
  };
  std::vector<Cursor> cursors_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  FunctionRef<void(int)>* job_ = nullptr;
  bool stop_ = false;
};

}  // namespace karma::hostopt
