// The persistent host thread pool: workers sleep on a generation counter (a futex) between jobs.
#include "mpi_shim/host_optimizer/thread_pool.h"

#include <system_error>

namespace karma::hostopt {

ThreadPool::ThreadPool(int threads) : cursors_(static_cast<size_t>(threads)) {}

Result<std::unique_ptr<ThreadPool>> ThreadPool::Create(int threads) {
  if (threads < 1) return InvalidArgument("thread pool: need at least 1 thread, got " + std::to_string(threads));
  std::unique_ptr<ThreadPool> pool(new ThreadPool(threads));
  try {
    pool->threads_.reserve(static_cast<size_t>(threads - 1));
    for (int i = 1; i < threads; ++i) pool->threads_.emplace_back([p = pool.get(), i] { p->WorkerLoop(i); });
  } catch (const std::system_error& e) {
    // The destructor stops and joins the threads that did start.
    return Status(Code::kResourceExhausted, "thread pool: cannot start a thread: " + std::string(e.what()));
  }
  return pool;
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    (*job_)(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::Run(FunctionRef<void(int)> fn) {
  if (threads_.empty()) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(static_cast<int>(threads_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  fn(0);
  for (int left = pending_.load(std::memory_order_acquire); left != 0; left = pending_.load(std::memory_order_acquire)) {
    pending_.wait(left, std::memory_order_acquire);
  }
  job_ = nullptr;
}

void ThreadPool::ParallelFor(size_t n, FunctionRef<void(size_t, int)> fn) {
  const size_t workers = cursors_.size();
  for (size_t w = 0; w < workers; ++w) {
    cursors_[w].next.store(n * w / workers, std::memory_order_relaxed);
    cursors_[w].end = n * (w + 1) / workers;
  }
  Run([&](int worker) {
    for (size_t k = 0; k < workers; ++k) {
      Cursor& c = cursors_[(static_cast<size_t>(worker) + k) % workers];
      for (size_t i = c.next.fetch_add(1, std::memory_order_relaxed); i < c.end;
           i = c.next.fetch_add(1, std::memory_order_relaxed)) {
        fn(i, worker);
      }
    }
  });
}

}  // namespace karma::hostopt
