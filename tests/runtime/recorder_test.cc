// Turning a recording into a trace: how allocations holding several tensors appear as buffers.
#include <gtest/gtest.h>

#include "runtime/session/recorder.h"

namespace karma::rt {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// One arena allocation of `size` bytes at 64 MiB, made before the iteration, and ops that each pass pointers at
// the given offsets (kernel arguments: extent unknown; `stated` extents for library operands).
struct Use {
  uint64_t offset;
  Access access;
  uint64_t extent = 0;
  bool gaps = false;
};

Recording OneAllocation(uint64_t size, const std::vector<std::vector<Use>>& ops) {
  Recording rec;
  BufferEntry e;
  e.start = 64 * kMiB;
  e.size = size;
  e.serial = 7;
  e.origin = Origin::kArena;
  rec.Buffer(e);
  for (size_t i = 0; i < ops.size(); ++i) {
    RecordedOp& op = rec.ops.emplace_back();
    op.kind = trace::OpKind::kKernel;
    op.name = "k" + std::to_string(i);
    for (const Use& u : ops[i]) {
      op.uses.push_back(RecordedUse{e.serial, u.offset, u.extent, u.access});
      op.uses.back().gaps = u.gaps;
    }
    op.state.store(RecordedOp::kDone);
  }
  return rec;
}

// A caching allocator's 20 MiB segment holding 3 MiB tensors back to back: the trace's buffers are its pages
// (the tensors share pages, and residency moves by page), each used by the ops of the tensors on it.
TEST(FinishRecording, LargeSegmentHoldingSeveralTensorsBecomesPages) {
  const uint64_t t = 3 * kMiB;
  Recording rec = OneAllocation(20 * kMiB, {{{0, Access::kWrite}},
                                            {{0, Access::kRead}, {t, Access::kWrite}},
                                            {{t, Access::kRead}, {2 * t, Access::kWrite}}});
  CudaApi api;
  auto out = FinishRecording(rec, api, TraceContext{});
  ASSERT_TRUE(out.ok()) << out.status().message();
  // Tensors [0,3), [3,6), [6,20) MiB (the last one up to the end): every page is used.
  ASSERT_EQ(out->it.buffers.size(), 10u);
  for (size_t b = 0; b < out->buffers.size(); ++b) {
    EXPECT_EQ(out->it.buffers[b].bytes, 2 * kMiB);
    EXPECT_EQ(out->buffers[b].address, 64 * kMiB + 2 * kMiB * b);
    EXPECT_FALSE(out->buffers[b].exact);
  }
  // Page 1 holds the end of tensor 0 and the start of tensor 1: op 1 reads it and writes it. (A kernel's write
  // of unknown extent also reads, so page 2 is read and written too.)
  const trace::Op& op1 = out->it.ops[1];
  EXPECT_EQ(op1.reads, (std::vector<trace::BufferId>{0, 1, 2}));
  EXPECT_EQ(op1.writes, (std::vector<trace::BufferId>{1, 2}));
  // A library call writing tensor 1 ([3, 6) MiB) with its stated extent writes pages 1 and 2; it keeps the rest of
  // page 1 (the end of tensor 0), so it reads that one, while page 2 lies inside the tensor.
  Recording lib = OneAllocation(20 * kMiB, {{{0, Access::kWrite}},
                                            {{t, Access::kWrite, t}},
                                            {{2 * t, Access::kRead}}});
  lib.ops[1].kind = trace::OpKind::kLibrary;
  auto lout = FinishRecording(lib, api, TraceContext{});
  ASSERT_TRUE(lout.ok()) << lout.status().message();
  EXPECT_EQ(lout->it.ops[1].reads, (std::vector<trace::BufferId>{1}));
  EXPECT_EQ(lout->it.ops[1].writes, (std::vector<trace::BufferId>{1, 2}));
}

// A page that lies inside an operand whose extent the API stated holds that tensor only: it stays exact.
TEST(FinishRecording, PageInsideAStatedOperandIsExact) {
  Recording rec = OneAllocation(8 * kMiB, {{{kMiB, Access::kWrite, 6 * kMiB}}, {{7 * kMiB, Access::kRead}}});
  rec.ops[0].kind = trace::OpKind::kLibrary;
  CudaApi api;
  auto out = FinishRecording(rec, api, TraceContext{});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->buffers.size(), 4u);
  EXPECT_FALSE(out->buffers[0].exact);  // [0, 2): the operand starts at 1 MiB
  EXPECT_TRUE(out->buffers[1].exact);   // [2, 4)
  EXPECT_TRUE(out->buffers[2].exact);   // [4, 6)
  EXPECT_FALSE(out->buffers[3].exact);  // [6, 8): the operand ends at 7 MiB
}

// An operand whose extent skips bytes (a GEMM output with ldc above m): the skipped bytes may be another tensor's
// and keep their values, so its pages are not exact and the write also reads them.
TEST(FinishRecording, PageInsideAnOperandWithGapsIsNotExactAndIsAlsoRead) {
  for (const bool gaps : {false, true}) {
    Recording rec =
        OneAllocation(8 * kMiB, {{{kMiB, Access::kWrite, 6 * kMiB, gaps}}, {{7 * kMiB, Access::kRead}}});
    rec.ops[0].kind = trace::OpKind::kLibrary;
    CudaApi api;
    auto out = FinishRecording(rec, api, TraceContext{});
    ASSERT_TRUE(out.ok()) << out.status().message();
    ASSERT_EQ(out->buffers.size(), 4u);
    EXPECT_EQ(out->buffers[1].exact, !gaps) << gaps;  // [2, 4) MiB, inside the extent
    EXPECT_EQ(out->it.ops[0].writes, (std::vector<trace::BufferId>{0, 1, 2, 3}));
    // Pages 0 and 3 are covered in part either way; 1 and 2 wholly, but with gaps the write leaves bytes alone.
    const std::vector<trace::BufferId> reads = gaps ? std::vector<trace::BufferId>{0, 1, 2, 3}
                                                    : std::vector<trace::BufferId>{0, 3};
    EXPECT_EQ(out->it.ops[0].reads, reads) << gaps;
  }
}

// A 2 MiB allocation is one page: its tensors (a caching allocator's small pool) stay separate buffers.
TEST(FinishRecording, SmallSegmentKeepsItsTensors) {
  Recording rec = OneAllocation(2 * kMiB, {{{0, Access::kWrite}}, {{4096, Access::kWrite}}});
  CudaApi api;
  auto out = FinishRecording(rec, api, TraceContext{});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->buffers.size(), 2u);
  EXPECT_EQ(out->it.buffers[0].bytes, 4096u);
}

}  // namespace
}  // namespace karma::rt
