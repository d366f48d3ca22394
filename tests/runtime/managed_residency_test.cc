// The managed residency against the fake CUDA: one batched call per move on the stream of its direction, drops
// that order the user's stream after them, makes in the user's order, completion through the caller's events,
// and the mover threads.
#include "runtime/residency/managed_residency.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tests/runtime/fake_cuda.h"

namespace karma::rt {
namespace {

using testing::Fake;

constexpr uint64_t kPage = 2ull << 20;

class ManagedResidencyTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::ResetFake(); }
  cudaEvent_t Event() {
    cudaEvent_t e = nullptr;
    EXPECT_EQ(api_.cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    return e;
  }
  cudaStream_t Stream() {
    cudaStream_t s = nullptr;
    EXPECT_EQ(api_.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    return s;
  }
  CudaApi api_ = testing::FakeReplayApi();
  live::Stats stats_;
  ManagedResidency r_{api_, &stats_};
};

TEST_F(ManagedResidencyTest, AMoveOfSeveralRangesIsOneBatchedCallWithTheCallersEvents) {
  auto base = r_.Reserve(4 * kPage);
  ASSERT_TRUE(base.ok());
  const std::vector<ResidencyRange> ranges{{*base, kPage}, {*base + 2 * kPage, kPage}};
  const cudaEvent_t done = Event(), started = Event();
  const ResidencyTicket t = r_.Evict(ranges, {}, {done, started});
  EXPECT_NE(t.seq, 0u);
  ASSERT_EQ(Fake().moves.size(), 2u);
  EXPECT_EQ(Fake().moves[0].call, "prefetch");
  EXPECT_FALSE(Fake().moves[0].to_device);
  EXPECT_EQ(Fake().moves[0].batch, Fake().moves[1].batch);
  EXPECT_EQ(Fake().events[reinterpret_cast<uintptr_t>(done) - 1].stream,
            Fake().events[reinterpret_cast<uintptr_t>(started) - 1].stream);  // both on the eviction's stream
  // Its completion is the caller's event.
  EXPECT_FALSE(r_.Done(t));
  Fake().CompleteAll();
  EXPECT_TRUE(r_.Done(t));
  EXPECT_TRUE(r_.WaitOn(t, Stream()).ok());
  // A fetch goes on another stream, to the device.
  const cudaEvent_t in = Event();
  r_.Fetch(ranges, {}, {in, nullptr});
  EXPECT_TRUE(Fake().moves.back().to_device);
  EXPECT_NE(Fake().events[reinterpret_cast<uintptr_t>(in) - 1].stream,
            Fake().events[reinterpret_cast<uintptr_t>(done) - 1].stream);
  r_.Release(*base);
}

TEST_F(ManagedResidencyTest, AMoveWithoutADoneEventCannotBeWaitedFor) {
  auto base = r_.Reserve(kPage);
  ASSERT_TRUE(base.ok());
  const ResidencyTicket t = r_.Fetch({*base, kPage}, {});
  EXPECT_NE(t.seq, 0u);
  EXPECT_FALSE(r_.WaitOn(t, Stream()).ok());
  EXPECT_TRUE(r_.WaitOn({}, Stream()).ok());  // no seq: nothing to wait for
}

TEST_F(ManagedResidencyTest, DropsDiscardAndMakesDiscardAndPrefetchOnTheUsersStream) {
  auto base = r_.Reserve(2 * kPage);
  ASSERT_TRUE(base.ok());
  const cudaStream_t user = Stream();
  const ResidencyRange range{*base, 2 * kPage};
  const cudaEvent_t last_use = Event();
  ASSERT_EQ(api_.cudaEventRecord(last_use, user), cudaSuccess);
  const int records = Fake().event_records;
  EXPECT_EQ(r_.Drop({&range, 1}, {&last_use, 1}, /*held=*/true, user).seq, 0u);
  ASSERT_EQ(Fake().moves.size(), 1u);
  EXPECT_EQ(Fake().moves[0].call, "discard");
  EXPECT_EQ(Fake().event_records, records + 1);  // the drop's position, for `user` to wait on
  EXPECT_EQ(r_.Make({&range, 1}, {}, user).seq, 0u);  // in `user`'s order: nothing to wait for
  ASSERT_EQ(Fake().moves.size(), 2u);
  EXPECT_EQ(Fake().moves[1].call, "discard+prefetch");
  EXPECT_TRUE(Fake().moves[1].to_device);
  // The legacy default stream: the batched call refuses it, a plain prefetch serves.
  r_.Make({&range, 1}, {}, cudaStream_t{nullptr});
  EXPECT_EQ(Fake().moves.back().call, "prefetch");
  EXPECT_EQ(Fake().unrecorded_uses, 0);
}

TEST_F(ManagedResidencyTest, MoverThreadsIssueTheMovesAndRecordedWaitsForThem) {
  r_.SetThreads(true);
  auto base = r_.Reserve(kPage);
  ASSERT_TRUE(base.ok());
  const cudaEvent_t done = Event();
  r_.Evict({*base, kPage}, {});
  r_.Fetch(std::vector<ResidencyRange>{{*base, kPage}}, {}, {done, nullptr});
  r_.Recorded(done);
  EXPECT_TRUE(Fake().events[reinterpret_cast<uintptr_t>(done) - 1].recorded);
  r_.Finish();
  ASSERT_EQ(Fake().moves.size(), 2u);
  EXPECT_NE(Fake().moves[0].thread, std::this_thread::get_id());
  EXPECT_GT(stats_.mover_move_ns.load(), 0u);
}

}  // namespace
}  // namespace karma::rt
