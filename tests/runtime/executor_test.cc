// The executor against the fake CUDA: what it asks managed memory to do for a hand-made replay program.
#include "runtime/session/executor.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/runtime/fake_cuda.h"

namespace karma::rt {
namespace {

using testing::Fake;

constexpr uint64_t kAddr = 0x7f0000000000ull;  // page aligned
constexpr uint64_t kBytes = 4ull << 20;

// Two ops on the legacy stream. Buffer 0 lies in memory the application keeps (a caching allocator's segment):
// op 0 overwrites it (a library call), op 1 uses it last, and the program evicts it after op 1 as a dead value.
std::shared_ptr<const ReplayProgram> DeadValueProgram() {
  auto p = std::make_shared<ReplayProgram>();
  p->period = 2;
  p->shape = {11, 22};
  p->stream = {0, 0};
  ReplayBuffer b;
  b.address = b.alloc_start = kAddr;
  b.bytes = kBytes;
  b.alloc_bytes = 5 * kBytes;
  b.origin = Origin::kArena;
  p->buffers = {b};
  p->after.resize(3);
  p->after[2].push_back({ReplayProgram::Move::kEvict, 0, UINT32_MAX - 1, UINT32_MAX});
  p->room_from.resize(3);
  p->waits.resize(2);
  p->recompute_before.resize(2);
  p->reads.resize(2);
  p->overwritten = {{0}, {}};
  p->relaunch.resize(2);
  p->in_recompute.assign(2, false);
  p->uses = {{0}, {0}};
  p->planned_bytes = {kBytes, kBytes};
  return p;
}

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::ResetFake(); }
  // One iteration (ops n and n + 1), op 0 called with `operands`.
  void Iteration(Executor& e, uint64_t n, const std::vector<Operand>& operands) {
    bool wants = false;
    const uint32_t p0 = e.Before(n, 11, 0, operands, &wants);
    ASSERT_EQ(p0, 0u);
    e.After(p0, true);
    const uint32_t p1 = e.Before(n + 1, 22, 0, {}, &wants);
    ASSERT_EQ(p1, 1u);
    e.After(p1, true);
  }
  std::vector<testing::FakeCuda::Move> TakeMoves() {
    std::vector<testing::FakeCuda::Move> m = std::move(Fake().moves);
    Fake().moves.clear();
    return m;
  }
  CudaApi api_ = testing::FakeReplayApi();
  live::Stats stats_;
};

// The next iteration's overwrite of a dead value evicted at the end of the last one: its pages are discarded and
// populated on the device (no transfer) only when the call, as made now, writes every byte of them.
TEST_F(ExecutorTest, ADeadValueIsRepopulatedOnlyForACallThatWritesAllOfIt) {
  Executor e(api_, &stats_);
  e.Install(DeadValueProgram(), 0, 0);
  const Operand covers{kAddr - 4096, Access::kWrite, false, kBytes + 8192, true};
  Iteration(e, 0, {covers});
  auto moves = TakeMoves();
  EXPECT_TRUE(moves.empty());  // nothing evicted yet: nothing to repopulate

  Iteration(e, 2, {covers});
  moves = TakeMoves();
  ASSERT_EQ(moves.size(), 2u);
  EXPECT_EQ(moves[0].call, "prefetch");  // the eviction after op 1 of the first iteration
  EXPECT_FALSE(moves[0].to_device);
  EXPECT_EQ(moves[0].addr, kAddr);
  EXPECT_EQ(moves[0].bytes, kBytes);
  EXPECT_EQ(moves[1].call, "discard+prefetch");
  EXPECT_TRUE(moves[1].to_device);
  EXPECT_EQ(moves[1].addr, kAddr);
  EXPECT_EQ(moves[1].bytes, kBytes);
  EXPECT_EQ(stats_.discarded_bytes.load(), kBytes);

  // Calls that would leave some of its bytes as they were: the value is brought back instead.
  const std::vector<std::vector<Operand>> partial = {
      {{kAddr, Access::kWrite, false, kBytes - 8, true}},            // short of its end
      {{kAddr, Access::kReadWrite, false, kBytes, false}},          // accumulates (beta != 0)
      {{kAddr, Access::kWrite, false, kBytes, false}},              // strided: gaps between columns
      {{kAddr + kBytes, Access::kWrite, false, kBytes, true}},      // somewhere else
      {{kAddr, Access::kWrite, true, kBytes, true}},                // a workspace
      {}};
  uint64_t n = 4;
  for (const std::vector<Operand>& ops : partial) {
    Iteration(e, n, ops);
    n += 2;
    moves = TakeMoves();
    ASSERT_EQ(moves.size(), 2u);
    EXPECT_EQ(moves[1].call, "prefetch");
    EXPECT_TRUE(moves[1].to_device);
    EXPECT_EQ(moves[1].addr, kAddr);
  }
  EXPECT_EQ(stats_.discarded_bytes.load(), kBytes);
}

}  // namespace
}  // namespace karma::rt
