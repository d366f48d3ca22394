// The executor's mover threads: lanes run their jobs in order, a job runs after the jobs of other lanes it names,
// and a ticket is waited for until its job has run.
#include "runtime/residency/mover.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace karma::rt {
namespace {

using namespace std::chrono_literals;

TEST(Mover, ALaneRunsItsJobsInOrderOnAThreadOfItsOwn) {
  Mover m;
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  Mover::Ticket last;
  for (int i = 0; i < 20; ++i) {
    last = m.Post(0, {}, [&, i] {
      if (i % 5 == 0) std::this_thread::sleep_for(1ms);  // later jobs must not overtake a slow one
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  m.Wait(last);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(order.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[i], i);
  for (const auto& t : threads) EXPECT_NE(t, std::this_thread::get_id());
}

// A job waits for the job of another lane it names, however long that one takes; meanwhile that lane's thread is
// busy and the waiting lane's later jobs queue behind.
TEST(Mover, AJobRunsAfterTheOtherLanesJobItNames) {
  Mover m;
  std::atomic<bool> slow_done{false}, saw_done{false};
  const Mover::Ticket slow = m.Post(1, {}, [&] {
    std::this_thread::sleep_for(30ms);
    slow_done = true;
  });
  EXPECT_FALSE(m.Ran(slow));
  const Mover::Ticket after = m.Post(0, {slow}, [&] { saw_done = slow_done.load(); });
  m.Wait(after);
  EXPECT_TRUE(saw_done.load());
  EXPECT_TRUE(m.Ran(slow));
  EXPECT_TRUE(m.Ran(Mover::Ticket{}));  // no job: nothing to wait for
}

TEST(Mover, DrainRunsEverythingPostedAndLaterPostsStartAgain) {
  Mover m;
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) m.Post(i % 2, {}, [&] { ran++; });
  m.Drain();
  EXPECT_EQ(ran.load(), 10);
  const auto last = m.Last();
  EXPECT_TRUE(m.Ran(last[0]) && m.Ran(last[1]));
  m.Wait(m.Post(0, {}, [&] { ran++; }));
  EXPECT_EQ(ran.load(), 11);
}

// In a forked child the lanes are abandoned: a job then runs on the caller's thread, in order.
TEST(Mover, AbandonedLanesRunJobsOnTheCallersThread) {
  Mover m;
  m.AbandonAfterFork();
  std::thread::id where;
  const Mover::Ticket t = m.Post(0, {}, [&] { where = std::this_thread::get_id(); });
  EXPECT_TRUE(m.Ran(t));
  EXPECT_EQ(where, std::this_thread::get_id());
}

}  // namespace
}  // namespace karma::rt
