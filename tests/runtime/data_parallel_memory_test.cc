// libkarma_mpi.so's memory hooks as libkarma.so serves them (runtime/session/data_parallel_memory.h), against the
// fake CUDA: the moves go through the executor's residency, the buffers handed to the host are what the planner
// homes there, and a parameter the running plan homes comes back at the plan's time, not at once.
#include "runtime/session/data_parallel_memory.h"

#include <gtest/gtest.h>

#include <memory>

#include "ground/common/managed_pages.h"
#include "tests/runtime/fake_cuda.h"

namespace {

// The shim's entry point, as libkarma_mpi.so exports it: this test binary exports it too (ENABLE_EXPORTS), so that
// DataParallelMemory::Install finds it with dlsym(RTLD_DEFAULT, ...).
karma_dp_memory_hooks g_hooks{};
int g_set_calls = 0;

}  // namespace

extern "C" __attribute__((visibility("default"))) karma_status karma_dp_set_memory_hooks(
    const karma_dp_memory_hooks* hooks) {
  ++g_set_calls;
  g_hooks = hooks != nullptr ? *hooks : karma_dp_memory_hooks{};
  return KARMA_OK;
}

namespace karma::rt {
namespace {

constexpr uint64_t kAddr = 0x7f0000000000ull;  // page aligned
constexpr uint64_t kBytes = 4ull << 20;

class DataParallelMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ResetFake();
    g_hooks = {};
    g_set_calls = 0;
  }
  std::vector<testing::FakeCuda::Move> TakeMoves() {
    std::vector<testing::FakeCuda::Move> m = std::move(testing::Fake().moves);
    testing::Fake().moves.clear();
    return m;
  }
  void ToHost(uint64_t addr, uint64_t bytes) { g_hooks.to_host(g_hooks.ctx, reinterpret_cast<void*>(addr), bytes); }
  void ToDevice(uint64_t addr, uint64_t bytes) {
    g_hooks.to_device(g_hooks.ctx, reinterpret_cast<void*>(addr), bytes);
  }
  CudaApi api_ = testing::FakeReplayApi();
  live::Stats stats_;
};

// A program of one op whose plan homes buffer 0 (kAddr, kBytes) on the host and swaps it in for the op.
std::shared_ptr<const ReplayProgram> HomingProgram() {
  auto p = std::make_shared<ReplayProgram>();
  p->period = 1;
  p->shape = {11};
  p->stream = {0};
  ReplayBuffer b;
  b.address = kAddr;
  b.bytes = kBytes;
  b.origin = Origin::kArena;
  p->buffers = {b};
  p->brought_back = {true};
  p->after.resize(2);
  p->room_from.resize(2);
  p->waits.resize(1);
  p->recompute_before.resize(1);
  p->reads.resize(1);
  p->relaunch.resize(1);
  p->in_recompute.assign(1, false);
  p->uses = {{0}};
  p->planned_bytes = {kBytes};
  return p;
}

TEST_F(DataParallelMemoryTest, TheShimsBuffersMoveThroughTheResidencyAndTheirBuffersAreHomed) {
  Executor e(api_, &stats_);
  DataParallelMemory dp(api_, e);
  ASSERT_TRUE(dp.Install());
  ASSERT_NE(g_hooks.to_host, nullptr);
  ASSERT_NE(g_hooks.sync, nullptr);
  ASSERT_NE(g_hooks.to_device, nullptr);

  // A gradient of whole pages leaves in one managed prefetch to the host; a small one inside a page others share
  // moves nothing (the host reads it where it is).
  ToHost(kAddr, kBytes);
  ToHost(kAddr + 2 * kBytes + 100, 4000);
  auto moves = TakeMoves();
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0].call, "prefetch");
  EXPECT_FALSE(moves[0].to_device);
  EXPECT_EQ(moves[0].addr, kAddr);
  EXPECT_EQ(moves[0].bytes, kBytes);
  g_hooks.sync(g_hooks.ctx);
  EXPECT_EQ(stats_.evicted_bytes.load(), kBytes);

  // What the planner homes: every buffer of the recording that a range handed to the host overlaps.
  RecordedIteration rec;
  for (const auto& [addr, bytes] : std::vector<std::pair<uint64_t, uint64_t>>{
           {kAddr, kBytes},                      // the gradient
           {kAddr + kBytes, kBytes},             // right after it: not handed over
           {kAddr + 2 * kBytes, kResidencyPage},  // holds the small one
           {kAddr + 2 * kBytes + kResidencyPage, kResidencyPage}}) {
    ReplayBuffer b;
    b.address = addr;
    b.bytes = bytes;
    rec.buffers.push_back(b);
  }
  EXPECT_EQ(dp.HomedBuffers(rec), (std::vector<bool>{true, false, true, false}));
  // Ops: 0 writes the gradient (buffer 0), 1 reads it (an optimizer on the device): the device is not done with it
  // when the shim hands it over. Buffer 2 is only read (a parameter the host updates): still homed.
  trace::Op write, read;
  write.id = 0;
  write.writes = {0};
  write.reads = {2};
  read.id = 1;
  read.reads = {0, 2};
  rec.it.ops = {write, read};
  EXPECT_EQ(dp.HomedBuffers(rec), (std::vector<bool>{false, false, true, false}));
  rec.it.ops.pop_back();  // the host updates from it: homed
  EXPECT_EQ(dp.HomedBuffers(rec), (std::vector<bool>{true, false, true, false}));

  // An updated parameter comes back at once while no plan homes it...
  ToDevice(kAddr, kBytes);
  moves = TakeMoves();
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_TRUE(moves[0].to_device);
  EXPECT_EQ(moves[0].addr, kAddr);
  // ...and at the plan's time (its swap-in before the first use) once one does.
  e.Install(HomingProgram(), 0, 0);
  EXPECT_TRUE(e.PlanBringsBack(kAddr + 100));
  EXPECT_FALSE(e.PlanBringsBack(kAddr + kBytes));
  ToDevice(kAddr, kBytes);
  EXPECT_TRUE(TakeMoves().empty());
  ToDevice(kAddr + kBytes, kBytes);  // not homed by the plan: at once
  EXPECT_EQ(TakeMoves().size(), 1u);

  dp.Uninstall();
  EXPECT_EQ(g_set_calls, 2);
  EXPECT_EQ(g_hooks.to_host, nullptr);  // the shim's own mover again
}

TEST_F(DataParallelMemoryTest, NothingIsHomedBeforeTheShimHandsOverABuffer) {
  Executor e(api_, &stats_);
  DataParallelMemory dp(api_, e);
  RecordedIteration rec;
  rec.buffers.resize(2);
  EXPECT_TRUE(dp.HomedBuffers(rec).empty());
}

}  // namespace
}  // namespace karma::rt
