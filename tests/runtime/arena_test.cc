// The managed-memory arena: alignment, packing, reuse, stream-ordered reuse, accounting, stable placement,
// failures.
#include "runtime/residency/arena.h"

#include <gtest/gtest.h>

#include <set>

#include "tests/runtime/fake_cuda.h"

namespace karma::rt {
namespace {

using testing::Fake;

class ArenaTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::ResetFake(); }
  CudaApi api_ = testing::FakeApi();
  Arena arena_{api_, Arena::Options{64ull << 20}};

  uint64_t Alloc(uint64_t size, StreamKey stream = kSyncStream) {
    const Arena::AllocResult r = arena_.Allocate(size, stream);
    EXPECT_EQ(r.status, Arena::AllocStatus::kOk);
    return r.addr;
  }
};

constexpr StreamKey kS1 = 0x1000;
constexpr StreamKey kS2 = 0x2000;

TEST(RangeAllocatorTest, BestFitSplitsAndCoalescesWithinARegion) {
  RangeAllocator r;
  r.AddRange(1000, 100, 1);
  r.AddRange(2000, 50, 2);
  EXPECT_EQ(r.Allocate(40), 2000u);  // the smaller range that fits
  EXPECT_EQ(r.Allocate(60), 1000u);
  EXPECT_EQ(r.free_bytes(), 50u);
  r.Free(1000, 60, 1);
  EXPECT_EQ(r.range_count(), 2u);  // merged with 1060..1100
  EXPECT_EQ(r.Allocate(100), 1000u);
  // Adjacent addresses of different regions never merge.
  RangeAllocator q;
  q.AddRange(0x1000, 0x1000, 1);
  q.AddRange(0x2000, 0x1000, 2);
  EXPECT_EQ(q.range_count(), 2u);
  EXPECT_EQ(q.Allocate(0x2000), 0u);
}

TEST(RangeAllocatorTest, AllocateAtTakesExactlyThatRange) {
  RangeAllocator r;
  r.AddRange(0, 1000, 1);
  EXPECT_TRUE(r.AllocateAt(200, 100));
  EXPECT_FALSE(r.AllocateAt(250, 10));
  EXPECT_FALSE(r.AllocateAt(950, 100));
  EXPECT_EQ(r.free_bytes(), 900u);
  EXPECT_EQ(r.range_count(), 2u);
}

TEST(RangeAllocatorTest, AllocateWhereTakesThePlaceThePreferenceHoldsForOrNothing) {
  RangeAllocator r;
  r.AddRange(0, 100, 1);
  r.AddRange(1000, 300, 1);
  std::vector<uint64_t> asked;
  auto at_1200 = [&](uint64_t at, uint64_t) {
    asked.push_back(at);
    return at == 1200;
  };
  // Best fit first, `step` apart inside each range: 0, then 1000, 1100, 1200.
  EXPECT_EQ(r.AllocateWhere(100, 100, at_1200, 10), 1200u);
  EXPECT_EQ(asked, (std::vector<uint64_t>{0, 1000, 1100, 1200}));
  EXPECT_EQ(r.free_bytes(), 300u);
  // No place within the tries: nothing is taken.
  asked.clear();
  EXPECT_EQ(r.AllocateWhere(50, 10, [](uint64_t, uint64_t) { return false; }, 3), 0u);
  EXPECT_EQ(r.free_bytes(), 300u);
}

TEST_F(ArenaTest, APreferenceChoosesAmongFreedBlocksAndFreeRanges) {
  constexpr uint64_t kBig = 4ull << 20;
  const uint64_t a = Alloc(kBig, kS1), b = Alloc(kBig, kS1), c = Alloc(kBig, kS1);
  // Say only `a`'s pages (and nothing beyond the three blocks) have device memory.
  arena_.SetPreference([&](uint64_t at, uint64_t bytes) { return at == a && bytes == kBig; });
  ASSERT_EQ(arena_.Free(b, kS1), Arena::FreeStatus::kFreed);
  ASSERT_EQ(arena_.Free(a, kS1), Arena::FreeStatus::kFreed);
  ASSERT_EQ(arena_.Free(c, kS1), Arena::FreeStatus::kFreed);
  // The stream's pending blocks: the one the preference holds for, though freed neither first nor last.
  EXPECT_EQ(Alloc(kBig, kS1), a);
  // None held for: the newest of the stream's pending blocks (it had device memory last).
  EXPECT_EQ(Alloc(kBig, kS1), c);
  // The free ranges when no pending block fits: a place the preference holds for, else best fit.
  const uint64_t d = Alloc(kBig, kS2);
  EXPECT_NE(d, 0u);
  EXPECT_NE(d, a);
}

// A range's own pages: the whole residency (64 KiB) pages inside it, none when it lies across a page boundary.
TEST(OwnedPageBytesTest, CountsOnlyWholePagesInsideTheRange) {
  constexpr uint64_t kP = kResidencyPage;
  static_assert(kLargePage % kP == 0);
  EXPECT_EQ(OwnedPageBytes(0, 5 * kP), 5 * kP);
  EXPECT_EQ(OwnedPageBytes(kP / 2, 3 * kP), 2 * kP);  // half a page at each end
  EXPECT_EQ(OwnedPageBytes(kP, kP - 1), 0u);
  EXPECT_EQ(OwnedPageBytes(kP - 1, kP), 0u);  // one byte short of a page
  EXPECT_EQ(OwnedPageBytes(kP - 1, kP + 1), kP);
  EXPECT_EQ(OwnedPageBytes(0, kLargePage + 1), kLargePage);
  EXPECT_EQ(PageUp(kLargePage + 1), kLargePage + kP);
}

TEST_F(ArenaTest, LargeBuffersAreWholeAlignedPages) {
  const uint64_t a = Alloc(3 << 20);
  const uint64_t b = Alloc(kSmallLimit + 1);
  EXPECT_EQ(a % kLargePage, 0u);
  EXPECT_EQ(b % kLargePage, 0u);
  EXPECT_GE(b > a ? b - a : a - b, 4ull << 20);  // 3 MiB occupies two pages
  const ArenaUsage u = arena_.usage();
  EXPECT_EQ(u.live_bytes, (4ull << 20) + (2ull << 20));
  EXPECT_EQ(u.requested_bytes, (3ull << 20) + kSmallLimit + 1);
  EXPECT_EQ(u.segments, 1u);
}

TEST_F(ArenaTest, SmallBuffersArePackedIntoOneSlab) {
  std::set<uint64_t> pages;
  uint64_t prev = 0;
  for (int i = 0; i < 100; ++i) {
    const uint64_t p = Alloc(1000);
    EXPECT_EQ(p % kSmallAlign, 0u);
    if (i > 0) {
      EXPECT_EQ(p - prev, 1024u);  // consecutive, 256-byte granules
    }
    prev = p;
    pages.insert(p / kLargePage);
  }
  EXPECT_EQ(pages.size(), 1u);
  EXPECT_EQ(arena_.usage().live_bytes, 100u * 1024);
}

TEST_F(ArenaTest, FreedBlocksAreReusedWithoutNewSegmentsOrCudaFree) {
  const uint64_t a = Alloc(8 << 20);
  ASSERT_EQ(arena_.Free(a, kSyncStream), Arena::FreeStatus::kFreed);
  Fake().CompleteAll();
  const uint64_t b = Alloc(8 << 20);
  EXPECT_EQ(a, b);
  EXPECT_EQ(Fake().managed_calls, 1);
  EXPECT_EQ(Fake().real_free_calls, 0);
}

TEST(RangeAllocatorTest, FreeBytesInCountsTheFreeRangesInsideABound) {
  RangeAllocator r;
  r.AddRange(0, 1000, 1);
  EXPECT_TRUE(r.AllocateAt(200, 100));
  EXPECT_EQ(r.FreeBytesIn(0, 1000), 900u);
  EXPECT_EQ(r.FreeBytesIn(150, 350), 100u);  // 150..200 and 300..350
  EXPECT_EQ(r.FreeBytesIn(200, 300), 0u);
  EXPECT_EQ(r.FreeBytesIn(900, 2000), 100u);
}

// A small block's free names the slab pages it leaves without a live block: its own whole pages at once, and a
// page it shares once the neighbour there is free or was freed earlier on the same stream; a neighbour on another
// stream still pending, or a live one, keeps the shared page.
TEST_F(ArenaTest, SlabPagesFreedByASmallBlockAreThoseItLeavesEmpty) {
  using Pages = std::vector<std::pair<uint64_t, uint64_t>>;
  auto pages = [](uint64_t lo, uint64_t hi) {  // the residency pages inside [lo, hi)
    Pages out;
    for (uint64_t p = PageUp(lo); p + kResidencyPage <= hi; p += kResidencyPage) out.emplace_back(p, kResidencyPage);
    return out;
  };
  const uint64_t a = Alloc(900 << 10, kS1);
  const uint64_t b = Alloc(900 << 10, kS1);
  const uint64_t c = Alloc(200 << 10, kS1);
  ASSERT_EQ(AlignDown(a, kLargePage), AlignDown(c, kLargePage));  // one slab
  ASSERT_TRUE(a < b && b < c);
  ASSERT_NE(b % kResidencyPage, 0u);  // b shares its first page with a
  ASSERT_NE(c % kResidencyPage, 0u);  // and its last with c
  const uint64_t b_end = b + (900 << 10);
  EXPECT_EQ(arena_.SlabPagesFreedBy(b, kS1), pages(b, b_end));  // a and c are live: b's own pages
  EXPECT_TRUE(arena_.SlabPagesFreedBy(Alloc(4 << 20), kSyncStream).empty());  // a large block's pages are its own
  Fake().streams[kS1].submitted += 3;  // the frees stay pending
  Fake().streams[kS2].submitted += 3;
  arena_.Free(a, kS1);
  arena_.Free(c, kS2);
  // A free pending on b's stream is ordered before b's: the page b shares with that block goes; the other free
  // may not have happened yet.
  EXPECT_EQ(arena_.SlabPagesFreedBy(b, kS1), pages(AlignDown(b, kResidencyPage), b_end));
  EXPECT_EQ(arena_.SlabPagesFreedBy(b, kS2), pages(b, PageUp(b_end)));
  Fake().CompleteAll();
  arena_.Poll();
  EXPECT_EQ(arena_.SlabPagesFreedBy(b, kSyncStream), pages(AlignDown(b, kResidencyPage), PageUp(b_end)));
  EXPECT_TRUE(arena_.SlabPagesFreedBy(b + 1, kS1).empty());  // not a block
}

TEST_F(ArenaTest, StreamOrderedFreeWaitsForTheStreamExceptOnTheSameStream) {
  const uint64_t a = Alloc(4 << 20, kS1);
  Fake().streams[kS1].submitted += 5;  // kernels still using `a`
  ASSERT_EQ(arena_.Free(a, kS1), Arena::FreeStatus::kFreed);
  EXPECT_EQ(arena_.usage().pending_bytes, 4ull << 20);
  // Another stream must not get it yet.
  const uint64_t b = Alloc(4 << 20, kS2);
  EXPECT_NE(a, b);
  // cudaMalloc (no stream) must not either.
  const uint64_t c = Alloc(4 << 20);
  EXPECT_NE(a, c);
  // The freeing stream may: its later work is ordered after the free.
  const uint64_t d = Alloc(4 << 20, kS1);
  EXPECT_EQ(a, d);
  EXPECT_EQ(arena_.usage().same_stream_reuses, 1u);
  EXPECT_EQ(arena_.usage().pending_bytes, 0u);
}

TEST_F(ArenaTest, PendingBlocksReturnOnceTheEventCompletes) {
  const uint64_t a = Alloc(4 << 20, kS1);
  Fake().streams[kS1].submitted += 3;
  arena_.Free(a, kS1);
  arena_.Poll();
  EXPECT_EQ(arena_.usage().pending_bytes, 4ull << 20);
  Fake().Complete(kS1);
  EXPECT_EQ(Alloc(4 << 20, kS2), a);
  EXPECT_EQ(arena_.usage().pending_bytes, 0u);
}

TEST_F(ArenaTest, PerThreadDefaultStreamIsNeverReusedByHandle) {
  const uint64_t a = Alloc(4 << 20, 0x2);
  arena_.Free(a, 0x2);
  EXPECT_NE(Alloc(4 << 20, 0x2), a);  // 0x2 names a different stream on every thread
}

TEST_F(ArenaTest, DoubleFreeAndForeignPointers) {
  const uint64_t a = Alloc(1 << 20);
  EXPECT_EQ(arena_.Free(a, kSyncStream), Arena::FreeStatus::kFreed);
  EXPECT_EQ(arena_.Free(a, kSyncStream), Arena::FreeStatus::kInvalid);
  EXPECT_EQ(arena_.Free(a + 256, kSyncStream), Arena::FreeStatus::kInvalid);
  EXPECT_EQ(arena_.Free(0x42, kSyncStream), Arena::FreeStatus::kNotArena);
  EXPECT_TRUE(arena_.Contains(a));
  EXPECT_FALSE(arena_.Contains(0x42));
}

TEST_F(ArenaTest, LargeRequestsGetTheirOwnSegment) {
  const uint64_t a = Alloc(100ull << 20);  // beyond the 64 MiB segment size
  EXPECT_EQ(a % kLargePage, 0u);
  EXPECT_EQ(arena_.usage().segments, 1u);
  EXPECT_GE(arena_.usage().reserved_bytes, 100ull << 20);
}

TEST_F(ArenaTest, OutOfMemoryIsReportedAndLeavesTheErrorAsCudaMallocWould) {
  Fake().managed_limit = 128ull << 20;
  const Arena::AllocResult big = arena_.Allocate(1ull << 40, kSyncStream);
  EXPECT_EQ(big.status, Arena::AllocStatus::kOutOfMemory);
  EXPECT_EQ(big.error, cudaErrorMemoryAllocation);
  EXPECT_EQ(Fake().last_error, cudaErrorMemoryAllocation);
  // The driver API's callers must not find a runtime error.
  Fake().last_error = cudaSuccess;
  EXPECT_EQ(arena_.Allocate(1ull << 40, kSyncStream, /*keep_oom_error=*/false).status,
            Arena::AllocStatus::kOutOfMemory);
  EXPECT_EQ(Fake().last_error, cudaSuccess);
}

TEST_F(ArenaTest, ASmallerSegmentIsTriedBeforeGivingUpAndItsErrorIsCleared) {
  Fake().managed_limit = 40ull << 20;  // the 64 MiB default segment does not fit, an exact one does
  const uint64_t a = Alloc(30ull << 20);
  EXPECT_NE(a, 0u);
  EXPECT_EQ(Fake().managed_calls, 2);
  EXPECT_EQ(Fake().last_error, cudaSuccess);
}

TEST_F(ArenaTest, UnavailableManagedMemoryIsNotOutOfMemory) {
  Fake().managed_error = cudaErrorNotSupported;
  const Arena::AllocResult r = arena_.Allocate(1 << 20, kSyncStream);
  EXPECT_EQ(r.status, Arena::AllocStatus::kUnavailable);
  EXPECT_EQ(r.error, cudaErrorNotSupported);
  EXPECT_EQ(Fake().last_error, cudaSuccess);  // the caller passes the request through; no trace of ours
}

TEST_F(ArenaTest, TheIthAllocationOfAnIterationGoesWhereItWentLastTime) {
  const uint64_t q1 = Alloc(2 << 20), q2 = Alloc(2 << 20), q3 = Alloc(2 << 20);  // persistent buffers
  (void)q1;
  (void)q3;
  arena_.BeginIteration();
  const uint64_t a = Alloc(2 << 20);  // after the persistent ones
  arena_.Free(a, kSyncStream);
  // Between the iterations a persistent buffer goes away and leaves a hole that best fit would prefer.
  arena_.Free(q2, kSyncStream);
  Fake().CompleteAll();
  arena_.BeginIteration();
  EXPECT_EQ(Alloc(2 << 20), a);
  EXPECT_EQ(arena_.usage().placement_hits, 1u);
  EXPECT_EQ(Alloc(2 << 20), q2);  // what best fit alone gives: the hole
}

TEST_F(ArenaTest, ASameStreamPendingBlockCanBeTheHintedPlace) {
  arena_.BeginIteration();
  const uint64_t a = Alloc(6 << 20, kS1);
  Fake().streams[kS1].submitted++;
  arena_.Free(a, kS1);
  arena_.BeginIteration();
  EXPECT_EQ(Alloc(6 << 20, kS1), a);
  EXPECT_EQ(arena_.usage().placement_hits, 1u);
}

TEST_F(ArenaTest, FreesDuringGraphCaptureAreNeverReused) {
  const uint64_t a = Alloc(4 << 20, kS1);
  arena_.SetCapturing(true);
  arena_.Free(a, kS1);
  arena_.SetCapturing(false);
  Fake().CompleteAll();
  EXPECT_NE(Alloc(4 << 20, kS1), a);
  EXPECT_EQ(arena_.usage().leaked_bytes, 4ull << 20);
  EXPECT_EQ(Fake().event_records, 0);  // no event may be recorded into a capture
}

TEST_F(ArenaTest, EventsAreRecycled) {
  for (int i = 0; i < 50; ++i) {
    const uint64_t a = Alloc(4 << 20, kS1);
    arena_.Free(a, kS1);
    Fake().CompleteAll();
  }
  EXPECT_LE(Fake().events_created, 2);
}

}  // namespace
}  // namespace karma::rt
