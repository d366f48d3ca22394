// The executor against the fake CUDA: what it asks managed memory to do for a hand-made replay program.
#include "runtime/replay/executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/residency/arena.h"
#include "tests/runtime/fake_cuda.h"

namespace karma::rt {
namespace {

using testing::Fake;

constexpr uint64_t kAddr = 0x7f0000000000ull;  // page aligned
constexpr uint64_t kBytes = 4ull << 20;

// Two ops on the legacy stream. Buffer 0 lies in memory the application keeps: op 0 writes it, op 1 uses it last,
// and the program evicts it after op 1.
std::shared_ptr<const ReplayProgram> KeptMemoryProgram() {
  auto p = std::make_shared<ReplayProgram>();
  p->period = 2;
  p->shape = {11, 22};
  p->stream = {0, 0};
  ReplayBuffer b;
  b.address = kAddr;
  b.bytes = kBytes;
  b.origin = Origin::kArena;
  p->buffers = {b};
  p->after.resize(3);
  p->after[2].push_back({ReplayProgram::Move::kEvict, 0, UINT32_MAX - 1, UINT32_MAX});
  p->room_from.resize(3);
  p->waits.resize(2);
  p->recompute_before.resize(2);
  p->reads.resize(2);
  p->relaunch.resize(2);
  p->in_recompute.assign(2, false);
  p->uses = {{0}, {0}};
  p->planned_bytes = {kBytes, kBytes};
  return p;
}

// Three ops on the legacy stream and one buffer of `bytes` in its own arena block: op 0 reads it, the program evicts
// it after op 0 and brings it back for op 2, which reads it.
std::shared_ptr<const ReplayProgram> OutAndBackProgram(uint64_t bytes) {
  auto p = std::make_shared<ReplayProgram>();
  p->period = 3;
  p->shape = {11, 22, 33};
  p->stream = {0, 0, 0};
  ReplayBuffer b;
  b.address = kAddr;
  b.bytes = bytes;
  b.origin = Origin::kArena;
  p->buffers = {b};
  p->after.resize(4);
  p->after[1].push_back({ReplayProgram::Move::kEvict, 0, UINT32_MAX - 1, UINT32_MAX});
  p->after[2].push_back({ReplayProgram::Move::kPrefetch, 0, 0, UINT32_MAX, 2});
  p->room_from.resize(4);
  p->waits = {{}, {}, {0}};
  p->recompute_before.resize(3);
  p->reads = {{0}, {}, {0}};
  p->relaunch.resize(3);
  p->in_recompute.assign(3, false);
  p->uses = {{0}, {}, {0}};
  p->planned_bytes = {bytes, 0, bytes};
  p->actions = 1;
  return p;
}

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::ResetFake(); }
  std::vector<testing::FakeCuda::Move> TakeMoves() {
    std::vector<testing::FakeCuda::Move> m = std::move(Fake().moves);
    Fake().moves.clear();
    return m;
  }
  CudaApi api_ = testing::FakeReplayApi();
  live::Stats stats_;
};

// Residency in steady replay: cudaMemGetInfo's used bytes against what the program holds for the op about to run
// (the plan's bytes), from the second replayed iteration on, per ended iteration.
TEST_F(ExecutorTest, SteadyResidencyIsMeasuredAgainstWhatTheProgramHolds) {
  constexpr uint64_t kMiB = 1ull << 20;
  auto p = std::const_pointer_cast<ReplayProgram>(OutAndBackProgram(kMiB));
  Executor e(api_, &stats_);
  e.Install(p, 0, 0);
  // The device holds 4 MiB in iterations 0 and 1, 5 MiB (1 MiB more) in iteration 2, 3 MiB from iteration 3 on.
  const uint64_t used[] = {4 * kMiB, 4 * kMiB, 5 * kMiB, 3 * kMiB, 3 * kMiB};
  for (uint64_t n = 0; n < 13; ++n) {
    Fake().device_free = Fake().device_total - used[n / 3];
    bool wants = false;
    const uint32_t pos = e.Before(n, p->shape[n % 3], 0, &wants);
    ASSERT_EQ(pos, n % 3);
    e.After(pos, true);
    if (n == 5) {
      EXPECT_EQ(e.steady_residency().iterations, 0u);  // the first replayed iteration is not steady
    }
  }
  // Iterations 1 to 3 ended (4 has only started): sampled at the start (op 0), where the plan holds the most
  // (op 0), before the eviction anchored after op 0 (op 1) and the prefetch for op 2 (op 2).
  const Executor::Residency r = e.steady_residency();
  EXPECT_EQ(r.iterations, 3u);
  EXPECT_EQ(r.peak, 5 * kMiB);
  EXPECT_EQ(r.above_min, static_cast<int64_t>(2 * kMiB));  // 3 MiB at op 0 or 2 over the plan's 1 MiB
  EXPECT_EQ(r.above_max, static_cast<int64_t>(5 * kMiB));  // 5 MiB at op 1, where the plan holds nothing
  EXPECT_EQ(r.above_max_at, 1u);
  EXPECT_GE(r.samples, 9u);
}

TEST_F(ExecutorTest, AFreeDiscardsTheBlocksPagesAndTheSlabPagesItEmpties) {
  Executor e(api_, &stats_);
  e.Install(KeptMemoryProgram(), 0, 0);
  bool wants = false;
  ASSERT_EQ(e.Before(0, 11, 0, &wants), 0u);  // the program runs from here
  TakeMoves();
  e.OnFree(kAddr + kBytes, kLargePage, 0, true);
  auto moves = TakeMoves();
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0].call, "discard");
  EXPECT_EQ(moves[0].addr, kAddr + kBytes);
  EXPECT_EQ(moves[0].bytes, kLargePage);
  e.OnFree(kAddr + 2 * kBytes + 4096, 4096, 0, true);  // a small block on a page others still use
  EXPECT_TRUE(TakeMoves().empty());
  const std::vector<std::pair<uint64_t, uint64_t>> emptied = {{kAddr + 2 * kBytes, kLargePage}};
  e.OnFree(kAddr + 2 * kBytes + 8192, 4096, 0, true, emptied);  // the last block on it
  moves = TakeMoves();
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0].call, "discard");
  EXPECT_EQ(moves[0].addr, kAddr + 2 * kBytes);
  EXPECT_EQ(moves[0].bytes, kLargePage);
}

// Three prefetches leave after op 0 of three: buffer 0 for op 1, buffers 1 and 2 for op 2. Each op waits for its
// own data only, so each waiting op gets its own batch call, in the order the ops come.
TEST_F(ExecutorTest, PrefetchesThatLeaveTogetherAreBatchedPerWaitingOp) {
  auto p = std::make_shared<ReplayProgram>();
  p->period = 3;
  p->shape = {11, 22, 33};
  p->stream = {0, 0, 0};
  for (uint64_t i = 0; i < 3; ++i) {
    ReplayBuffer b;
    b.address = kAddr + i * kBytes;
    b.bytes = kBytes;
    b.origin = Origin::kArena;
    p->buffers.push_back(b);
  }
  p->after.resize(4);
  p->after[1] = {{ReplayProgram::Move::kPrefetch, 1, 0, UINT32_MAX, 2},
                 {ReplayProgram::Move::kPrefetch, 0, 1, UINT32_MAX, 1},
                 {ReplayProgram::Move::kPrefetch, 2, 2, UINT32_MAX, 2}};
  p->room_from.resize(4);
  p->waits = {{}, {1}, {0, 2}};
  p->recompute_before.resize(3);
  p->reads = {{}, {0}, {1, 2}};
  p->relaunch.resize(3);
  p->in_recompute.assign(3, false);
  p->uses = {{}, {0}, {1, 2}};
  p->planned_bytes = {3 * kBytes, 3 * kBytes, 3 * kBytes};
  p->actions = 3;
  // KARMA_BATCH_MOVES=0: the same prefetches in the same order, one call each.
  for (const bool batch : {true, false}) {
    SCOPED_TRACE(batch ? "batched" : "one call per range");
    Executor e(api_, &stats_);
    e.SetBatchMoves(batch);
    e.Install(p, 0, 0);
    bool wants = false;
    ASSERT_EQ(e.Before(0, 11, 0, &wants), 0u);
    e.After(0, true);
    TakeMoves();
    ASSERT_EQ(e.Before(1, 22, 0, &wants), 1u);  // after op 0: issued before op 1
    const auto moves = TakeMoves();
    ASSERT_EQ(moves.size(), 3u);
    for (const auto& m : moves) {
      EXPECT_EQ(m.call, "prefetch");
      EXPECT_TRUE(m.to_device);
    }
    EXPECT_EQ(moves[0].addr, kAddr);  // op 1's, alone
    EXPECT_EQ(moves[1].addr, kAddr + kBytes);
    EXPECT_EQ(moves[2].addr, kAddr + 2 * kBytes);
    EXPECT_NE(moves[0].batch, moves[1].batch);
    EXPECT_EQ(moves[1].batch == moves[2].batch, batch);  // op 2's, together when batched
    e.Uninstall();
  }
}

// KARMA_MOVE_THREADS=1: the eviction and the prefetch go out from the executor's threads, in the same calls as
// from the application's, even when each call blocks its caller; the application's thread queries the prefetch's
// event only once the mover has recorded it (an unrecorded event reads as complete), and the prefetch's stream
// waits for the eviction's event only once that is recorded.
TEST_F(ExecutorTest, MoveThreadsIssueTheSameMovesAndHandOverOnlyRecordedEvents) {
  auto p = OutAndBackProgram(kBytes);
  std::vector<testing::FakeCuda::Move> inline_moves;
  for (const bool threads : {false, true}) {
    SCOPED_TRACE(threads ? "move threads" : "on the application's thread");
    testing::ResetFake();
    Fake().move_delay_ms = 20;
    live::Stats stats;
    Executor e(api_, &stats);
    e.SetMoveThreads(threads);
    e.Install(p, 0, 0);
    for (uint64_t n = 0; n < 6; ++n) {
      bool wants = false;
      const uint32_t pos = e.Before(n, p->shape[n % 3], 0, &wants);
      ASSERT_EQ(pos, n % 3);
      e.After(pos, true);
    }
    e.Flush();
    EXPECT_EQ(Fake().unrecorded_uses, 0);
    // Each of the four calls held its thread at least 20 ms; the application's thread, with move threads, only
    // while it waited for a prefetch it needed.
    EXPECT_EQ(stats.replayed_iterations.load(), 2u);
    EXPECT_GE((threads ? stats.mover_move_ns : stats.app_move_ns).load(), 80'000'000u);
    EXPECT_EQ(stats.mover_move_ns.load() == 0, !threads);
    const std::string calls = e.CallsLine();  // per replayed iteration: one call each way
    EXPECT_NE(calls.find("prefetch 1.0 ("), std::string::npos) << calls;
    EXPECT_NE(calls.find("evict 1.0 ("), std::string::npos) << calls;
    EXPECT_EQ(calls.find("wait for the move threads") != std::string::npos, threads) << calls;
    auto moves = TakeMoves();
    ASSERT_EQ(moves.size(), 4u);  // two iterations: out after op 0, back in before op 2
    for (size_t i = 0; i < moves.size(); ++i) {
      EXPECT_EQ(moves[i].addr, kAddr);
      EXPECT_EQ(moves[i].to_device, i % 2 == 1);
      EXPECT_EQ(moves[i].thread != std::this_thread::get_id(), threads);
    }
    if (!threads) {
      inline_moves = moves;
    } else {
      for (size_t i = 0; i < moves.size(); ++i) {
        EXPECT_EQ(moves[i].call, inline_moves[i].call);
        EXPECT_EQ(moves[i].bytes, inline_moves[i].bytes);
      }
    }
    e.Uninstall();
  }
}

// The plan's moves are timed from the second replayed iteration on (with CUDA events around each call on its
// stream), until each direction has moved kLinkMinBytes: the rates the link gave them, once, from either thread.
TEST_F(ExecutorTest, MovesAreTimedOnceToMeasureTheLink) {
  constexpr uint64_t kMoved = 16ull << 20;  // kLinkMinBytes each way per iteration
  auto p = OutAndBackProgram(kMoved);
  for (const bool threads : {false, true}) {
    SCOPED_TRACE(threads ? "move threads" : "on the application's thread");
    testing::ResetFake();
    Fake().h2d_bytes_per_ns = 4;  // 4 GB/s to the device, 2.5 to the host
    Fake().d2h_bytes_per_ns = 2.5;
    live::Stats stats;
    Executor e(api_, &stats);
    e.SetMoveThreads(threads);
    e.Install(p, 0, 0);
    int measured_at = -1;
    for (uint64_t n = 0; n < 30; ++n) {
      bool wants = false;
      const uint32_t pos = e.Before(n, p->shape[n % 3], 0, &wants);
      ASSERT_EQ(pos, n % 3);
      e.After(pos, true);
      if (e.TakeLinkMeasured()) {
        EXPECT_EQ(measured_at, -1) << "reported twice";
        measured_at = static_cast<int>(n / 3);
      }
    }
    e.Flush();
    // Iterations 1 and 2 (the second and third) are timed; the events of each are read two iterations later.
    EXPECT_EQ(measured_at, 4);
    const Executor::LinkRates l = e.link_rates();
    EXPECT_EQ(l.iterations, 2u);
    EXPECT_EQ(l.h2d_bytes, 2 * kMoved);
    EXPECT_EQ(l.d2h_bytes, 2 * kMoved);
    EXPECT_NEAR(l.h2d_bw, 4e9, 4e9 * 1e-4);
    EXPECT_NEAR(l.d2h_bw, 2.5e9, 2.5e9 * 1e-4);
    EXPECT_FALSE(e.TakeLinkMeasured());
    e.Uninstall();
  }
  // Too little moved to tell, after kLinkMaxIterations: no rate, nothing reported.
  testing::ResetFake();
  Fake().h2d_bytes_per_ns = Fake().d2h_bytes_per_ns = 1;
  auto small = OutAndBackProgram(1ull << 20);
  live::Stats stats;
  Executor e(api_, &stats);
  e.Install(small, 0, 0);
  for (uint64_t n = 0; n < 3 * (Executor::kLinkMaxIterations + 4); ++n) {
    bool wants = false;
    e.After(e.Before(n, small->shape[n % 3], 0, &wants), true);
    EXPECT_FALSE(e.TakeLinkMeasured());
  }
  EXPECT_EQ(e.link_rates().iterations, Executor::kLinkMaxIterations);
  EXPECT_EQ(e.link_rates().h2d_bw, 0.0);
  e.Uninstall();
}

// A program's steady iteration time: the median of its iterations from the kTimedFrom-th replayed one on (CUDA
// events at iteration starts), without those that diverged; a newly installed program starts a new count.
TEST_F(ExecutorTest, EachProgramIsTimedOnItsWholeIterationsFromItsSecond) {
  auto p = KeptMemoryProgram();
  Executor e(api_, &stats_);
  EXPECT_EQ(e.program_time().serial, 0u);
  e.Install(p, 0, 0);
  // Iteration r (from 1) lasts r ms; iteration 5 diverges at its second op.
  for (uint64_t r = 1; r <= 10; ++r) {
    bool wants = false;
    e.After(e.Before(2 * (r - 1), 11, 0, &wants), true);
    const uint32_t pos = e.Before(2 * (r - 1) + 1, r == 5 ? 99 : 22, 0, &wants);
    if (pos != Executor::kNoPosition) e.After(pos, true);
    Fake().clock_ns += r * 1'000'000;
  }
  // Started iteration 10: iterations up to 8 are measured, 2..8 but 5 count (2 3 4 6 7 8: median 6 ms).
  Executor::ProgramTime t = e.program_time();
  EXPECT_EQ(t.serial, 1u);
  EXPECT_EQ(t.program, p);
  EXPECT_EQ(t.iterations, 6u);
  EXPECT_DOUBLE_EQ(t.median_ns, 6e6);
  auto q = std::make_shared<ReplayProgram>(*p);
  e.Install(q, 0, 0);
  bool wants = false;
  e.After(e.Before(20, 11, 0, &wants), true);
  t = e.program_time();
  EXPECT_EQ(t.serial, 2u);
  EXPECT_EQ(t.program, q);
  EXPECT_EQ(t.iterations, 0u);
  EXPECT_EQ(t.median_ns, 0.0);
  e.Uninstall();
}

// A plan that fits in the budget as the application runs it moves nothing, and neither does its replay: no
// discard at a free, no population at an allocation (on a GPU each costs the driver time per block).
TEST_F(ExecutorTest, AProgramThatMovesNothingLeavesFreesAndAllocationsAlone) {
  auto idle = std::make_shared<ReplayProgram>(*KeptMemoryProgram());
  for (auto& items : idle->after) items.clear();
  Executor e(api_, &stats_);
  e.Install(idle, 0, 0);
  bool wants = false;
  ASSERT_EQ(e.Before(0, 11, 0, &wants), 0u);
  TakeMoves();
  e.OnAllocation(kAddr + kBytes, kLargePage, 1, 0, true);
  e.OnFree(kAddr + kBytes, kLargePage, 0, true);
  e.OnFree(kAddr + 2 * kBytes + 8192, 4096, 0, true, {{{kAddr + 2 * kBytes, kLargePage}}});
  EXPECT_TRUE(TakeMoves().empty());
}

// Validation needs device memory it can copy: here the "device" is host memory and copies are memcpy.
cudaError_t HostMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
cudaError_t NoWait(cudaStream_t) { return cudaSuccess; }

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};
using HostBuffer = std::unique_ptr<unsigned char, FreeDeleter>;
HostBuffer PageAligned(uint64_t bytes) {
  return HostBuffer(static_cast<unsigned char*>(std::aligned_alloc(kLargePage, bytes)));
}

// Three ops on the legacy stream: op 0 computes buffer 0 (two pages) from buffer 1, op 1 uses buffer 0 last
// before op 2 reads it again; the plan discards buffer 0 after op 1 and recomputes it with op 0 before op 2.
std::shared_ptr<const ReplayProgram> RecomputeProgram(uint64_t target, uint64_t input, Relaunch producer) {
  auto p = std::make_shared<ReplayProgram>();
  p->period = 3;
  p->shape = {11, 22, 33};
  p->stream = {0, 0, 0};
  for (uint64_t addr : {target, input}) {
    ReplayBuffer b;
    b.address = addr;
    b.bytes = kBytes;
    b.origin = Origin::kArena;
    b.exact = true;
    p->buffers.push_back(b);
  }
  p->after.resize(4);
  p->after[2].push_back({ReplayProgram::Move::kDiscard, 0, 0, 0});
  p->room_from.resize(4);
  p->waits.resize(3);
  p->recompute_before = {{}, {}, {0}};
  p->recomputes.push_back({1, 2, {0}, {0}, {0}, {0, 1}, {}, {}});
  p->reads = {{1}, {0}, {0}};
  p->relaunch = {std::move(producer), nullptr, nullptr};
  p->in_recompute = {true, false, false};
  p->uses = {{0, 1}, {0}, {0}};
  p->planned_bytes = {2 * kBytes, kBytes, kBytes};
  p->actions = 2;
  return p;
}

// A recompute is trusted only when its launches rebuild every byte a discard would destroy: a producer that
// leaves half of its output as it was is rejected (and the output restored), one that writes all of it passes.
TEST_F(ExecutorTest, ValidationRejectsARecomputeThatLeavesPartOfItsTargetAsItWas) {
  api_.cudaMemcpyAsync = &HostMemcpyAsync;
  api_.cudaStreamSynchronize = &NoWait;
  for (const bool writes_all : {false, true}) {
    SCOPED_TRACE(writes_all ? "writes all of it" : "writes half of it");
    HostBuffer out = PageAligned(kBytes), in = PageAligned(kBytes);
    for (uint64_t i = 0; i < kBytes; ++i) in.get()[i] = static_cast<unsigned char>(i * 7 + 3);
    auto produce = [o = out.get(), x = in.get()](uint64_t bytes) {
      for (uint64_t i = 0; i < bytes; ++i) o[i] = static_cast<unsigned char>(x[i] ^ 0x5a);
    };
    produce(kBytes);  // the application's own launch of op 0
    const std::vector<unsigned char> value(out.get(), out.get() + kBytes);
    int launches = 0;
    auto producer = std::make_shared<const std::function<bool(const AddressMap&)>>([&](const AddressMap&) {
      ++launches;
      produce(writes_all ? kBytes : kBytes / 2);
      return true;
    });
    Executor e(api_, &stats_);
    e.Install(RecomputeProgram(reinterpret_cast<uint64_t>(out.get()), reinterpret_cast<uint64_t>(in.get()), producer),
              0, 0);
    bool wants = false;
    for (uint32_t pos = 0; pos < 3; ++pos) {
      const uint32_t at = e.Before(pos, 11 * (pos + 1), 0, &wants);
      ASSERT_EQ(at, pos);
      if (pos == 0) {
        EXPECT_TRUE(wants);
        e.SetLaunch(at, producer);
      }
      e.After(at, true);
    }
    EXPECT_EQ(launches, 1);
    EXPECT_TRUE(std::equal(value.begin(), value.end(), out.get()));  // rebuilt, or put back as it was
    EXPECT_EQ(e.TakeRequest(), writes_all ? Executor::Request::kNone : Executor::Request::kReplan);
    EXPECT_EQ(e.rejected_ops()[0], !writes_all);
    e.Uninstall();
  }
}

// A recompute's verdict carries over to a later program of the same recording that has it again (same launches,
// before the same op, same targets and scratch outputs): its target is discarded at once instead of evicted for a
// check. A new recording (Uninstall) forgets the verdicts.
TEST_F(ExecutorTest, AVerdictCarriesOverToALaterProgramWithTheSameRecompute) {
  api_.cudaMemcpyAsync = &HostMemcpyAsync;
  api_.cudaStreamSynchronize = &NoWait;
  HostBuffer out = PageAligned(kBytes), in = PageAligned(kBytes);
  for (uint64_t i = 0; i < kBytes; ++i) in.get()[i] = static_cast<unsigned char>(i * 3 + 1);
  auto produce = [o = out.get(), x = in.get()] {
    for (uint64_t i = 0; i < kBytes; ++i) o[i] = static_cast<unsigned char>(x[i] + 7);
  };
  int launches = 0;
  auto producer = std::make_shared<const std::function<bool(const AddressMap&)>>([&](const AddressMap&) {
    ++launches;
    produce();
    return true;
  });
  const auto target = reinterpret_cast<uint64_t>(out.get());
  auto program = [&] { return RecomputeProgram(target, reinterpret_cast<uint64_t>(in.get()), producer); };
  Executor e(api_, &stats_);
  uint64_t n = 0;
  // One iteration of the program installed last; whether the target left by a discard (trusted) or an eviction.
  auto iteration = [&] {
    TakeMoves();
    bool wants = false;
    for (uint32_t pos = 0; pos < 3; ++pos, ++n) {
      const uint32_t at = e.Before(n, 11 * (pos + 1), 0, &wants);
      EXPECT_EQ(at, pos);
      if (pos == 0) {
        produce();
        e.SetLaunch(at, producer);
      }
      e.After(at, true);
    }
    bool discarded = false, evicted = false;
    for (const testing::FakeCuda::Move& m : TakeMoves()) {
      if (m.addr != target) continue;
      discarded = discarded || m.call == "discard";
      evicted = evicted || (m.call == "prefetch" && !m.to_device);
    }
    EXPECT_NE(discarded, evicted);
    return discarded;
  };
  e.Install(program(), 0, 0);
  EXPECT_FALSE(iteration());  // checked: evicted, not discarded
  EXPECT_EQ(launches, 1);
  EXPECT_TRUE(iteration());
  EXPECT_EQ(launches, 2);
  e.Install(program(), 0, 0);  // the same recompute in a new program
  EXPECT_TRUE(iteration());
  EXPECT_EQ(launches, 3);
  EXPECT_EQ(e.TakeRequest(), Executor::Request::kNone);
  e.Uninstall();
  e.Install(program(), 0, 0);  // as after a new recording
  EXPECT_FALSE(iteration());
  EXPECT_EQ(launches, 4);
  e.Uninstall();
}

// Op 0 also writes buffer 2, whose memory holds a newer value when the recompute runs (a caching allocator gave it
// to a later tensor): the plan lists it as a scratch output. The recompute's launch gets buffer 2's pointer mapped
// to scratch memory, so the newer value stays and the check passes; launched in place, it would overwrite it.
TEST_F(ExecutorTest, ARecomputesScratchOutputIsRedirectedAndLeavesTheNewerValue) {
  api_.cudaMemcpyAsync = &HostMemcpyAsync;
  api_.cudaStreamSynchronize = &NoWait;
  for (const bool scratch : {false, true}) {
    SCOPED_TRACE(scratch ? "scratch output" : "written in place");
    HostBuffer out = PageAligned(kBytes), in = PageAligned(kBytes), other = PageAligned(kBytes);
    std::memset(in.get(), 7, kBytes);
    std::memset(out.get(), 7 ^ 0x5a, kBytes);
    std::memset(other.get(), 0x33, kBytes);  // the newer value
    const uint64_t other_addr = reinterpret_cast<uint64_t>(other.get());
    uint64_t mapped_to = 0;
    auto producer = std::make_shared<const std::function<bool(const AddressMap&)>>([&](const AddressMap& map) {
      const uint64_t at = map(other_addr);
      mapped_to = at;
      if (at == other_addr) std::memset(other.get(), 0x11, kBytes);  // the old intermediate over the newer value
      std::memset(out.get(), 7 ^ 0x5a, kBytes);
      return true;
    });
    auto p = std::make_shared<ReplayProgram>(
        *RecomputeProgram(reinterpret_cast<uint64_t>(out.get()), reinterpret_cast<uint64_t>(in.get()), producer));
    ReplayBuffer b = p->buffers[0];
    b.address = other_addr;
    p->buffers.push_back(b);
    p->uses[0] = {0, 1, 2};
    if (scratch) {
      p->recomputes[0].scratch = {2};
    } else {
      p->recomputes[0].written.push_back(2);
      p->recomputes[0].used.push_back(2);
    }
    Executor e(api_, &stats_);
    e.Install(p, 0, 0);
    bool wants = false;
    for (uint32_t pos = 0; pos < 3; ++pos) {
      const uint32_t at = e.Before(pos, 11 * (pos + 1), 0, &wants);
      ASSERT_EQ(at, pos);
      if (pos == 0) e.SetLaunch(at, producer);
      e.After(at, true);
    }
    EXPECT_EQ(mapped_to != other_addr, scratch);
    if (scratch) {
      // The check ran in scratch memory, which leaves the device after it (nothing the plan counts is there).
      const auto& moves = Fake().moves;
      EXPECT_TRUE(std::any_of(moves.begin(), moves.end(),
                              [&](const auto& m) { return m.call == "discard" && m.addr == mapped_to; }));
    }
    EXPECT_EQ(other.get()[0], 0x33);  // kept, or put back after the rejected check
    EXPECT_EQ(e.TakeRequest(), scratch ? Executor::Request::kNone : Executor::Request::kReplan);
    e.Uninstall();
  }
}

// A recompute (RecomputeProgram) whose target the application allocates before op 0 of every iteration, with a
// producer that counts its launches; RunIteration plays the application's three ops from op number `first`.
struct AllocatedTargetRecompute {
  HostBuffer out = PageAligned(kBytes), in = PageAligned(kBytes);
  int launches = 0;
  Relaunch producer;
  std::shared_ptr<ReplayProgram> program;

  AllocatedTargetRecompute() {
    for (uint64_t i = 0; i < kBytes; ++i) in.get()[i] = static_cast<unsigned char>(i * 5 + 1);
    producer = std::make_shared<const std::function<bool(const AddressMap&)>>([this](const AddressMap&) {
      ++launches;
      Produce();
      return true;
    });
    program = std::make_shared<ReplayProgram>(*RecomputeProgram(target(), reinterpret_cast<uint64_t>(in.get()), producer));
    program->buffers[0].allocated_inside = true;
    program->buffers[0].alloc_ordinal = 0;
    program->alloc_size = {kBytes};
  }
  AllocatedTargetRecompute(const AllocatedTargetRecompute&) = delete;  // the producer points at this one
  AllocatedTargetRecompute& operator=(const AllocatedTargetRecompute&) = delete;
  uint64_t target() const { return reinterpret_cast<uint64_t>(out.get()); }
  void Produce() {
    for (uint64_t i = 0; i < kBytes; ++i) out.get()[i] = static_cast<unsigned char>(in.get()[i] + 1);
  }
  void RunIteration(Executor& e, uint64_t first, StreamKey stream = 0) {
    bool wants = false;
    for (uint32_t pos = 0; pos < 3; ++pos) {
      const uint32_t at = e.Before(first + pos, 11 * (pos + 1), stream, &wants);
      ASSERT_EQ(at, pos);
      if (pos == 0) {
        Produce();  // the application's launch
        e.SetLaunch(at, producer);
      }
      e.After(at, true);
    }
  }
};

// A first program installed right at an iteration's start has missed the allocations the application made before
// that iteration's first launch, so it does not know where this iteration's buffers are: the recompute's check
// waits for the next iteration (whose allocations it sees) instead of rejecting a good recompute.
TEST_F(ExecutorTest, AProgramInstalledAtAnIterationsStartValidatesInTheNextIteration) {
  api_.cudaMemcpyAsync = &HostMemcpyAsync;
  api_.cudaStreamSynchronize = &NoWait;
  AllocatedTargetRecompute r;
  Executor e(api_, &stats_);
  // The application has allocated the target (next op: 0) when the program arrives.
  e.Install(r.program, 0, 0, 0);
  for (uint64_t iteration = 0; iteration < 2; ++iteration) {
    SCOPED_TRACE(iteration);
    if (iteration == 1) e.OnAllocation(r.target(), kBytes, 3, 0, false);
    r.RunIteration(e, 3 * iteration);
    EXPECT_EQ(r.launches, iteration == 0 ? 0 : 1);  // checked in the second iteration only
    EXPECT_EQ(e.TakeRequest(), Executor::Request::kNone);
    EXPECT_FALSE(e.rejected_ops()[0]);
  }
  e.Uninstall();
}

// With explicit markers each marked iteration restarts the positions at a new base: its allocations are still
// its own (counted afresh), so the recompute is checked in the first marked iteration and then runs in every one.
// A program made in the middle of an iteration starts at the next marker. Ops after a marked iteration's end and
// before the next marker are outside every iteration: not a divergence.
TEST_F(ExecutorTest, MarkedIterationsEachCountTheirOwnAllocations) {
  api_.cudaMemcpyAsync = &HostMemcpyAsync;
  api_.cudaStreamSynchronize = &NoWait;
  AllocatedTargetRecompute r;
  Executor e(api_, &stats_);
  e.Install(r.program, UINT64_MAX, 0, 7);  // planned while op 7 runs: nothing until the next marker
  bool wants = false;
  EXPECT_EQ(e.Before(7, 22, 0, &wants), Executor::kNoPosition);
  uint64_t n = 8;
  for (int iteration = 0; iteration < 3; ++iteration) {
    SCOPED_TRACE(iteration);
    n += 5;  // ops outside the iteration (a data loader's copies, a log line) between the marked ones
    e.OnMarker(n);
    e.OnAllocation(r.target(), kBytes, n, 0, false);
    r.RunIteration(e, n);
    EXPECT_EQ(r.launches, iteration + 1);  // the check, then the recompute of every later iteration
    EXPECT_FALSE(e.rejected_ops()[0]);
    for (uint64_t k = 3; k < 5; ++k) EXPECT_EQ(e.Before(n + k, 99, 0, &wants), Executor::kNoPosition);
  }
  EXPECT_EQ(stats_.divergences.load(), 0u);
  EXPECT_EQ(e.TakeRequest(), Executor::Request::kNone);
  e.Uninstall();
}

// Once checked, the recompute runs in every iteration: its target, discarded after op 1, is populated on the device
// right before the relaunch with one discard-and-prefetch call, not a prefetch of the discarded pages (on an H100
// kernels writing pages populated that way ran up to 180x slower, docs/gpu-results.md).
TEST_F(ExecutorTest, ARecomputesDiscardedTargetIsPopulatedByADiscardAndPrefetchCall) {
  api_.cudaMemcpyAsync = &HostMemcpyAsync;
  api_.cudaStreamSynchronize = &NoWait;
  AllocatedTargetRecompute r;
  constexpr StreamKey kStream = 0x5000;  // the batch calls refuse the legacy stream
  r.program->stream = {kStream, kStream, kStream};
  Executor e(api_, &stats_);
  e.Install(r.program, 0, 0, 0);
  for (uint64_t iteration = 0; iteration < 3; ++iteration) {
    SCOPED_TRACE(iteration);
    e.OnAllocation(r.target(), kBytes, 3 * iteration, kStream, false);
    TakeMoves();
    r.RunIteration(e, 3 * iteration, kStream);
    const auto moves = TakeMoves();
    if (iteration < 2) continue;
    EXPECT_EQ(r.launches, 2);  // the check, then this iteration's recompute
    std::vector<std::string> calls;
    for (const auto& m : moves) {
      if (m.addr == r.target()) calls.push_back(m.call);
    }
    EXPECT_EQ(calls, (std::vector<std::string>{"discard", "discard+prefetch"}));
  }
  EXPECT_EQ(e.TakeRequest(), Executor::Request::kNone);
  e.Uninstall();
}

}  // namespace
}  // namespace karma::rt
