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

// A caching allocator's 20 MiB segment holding 3 MiB tensors back to back: the trace's buffers are the tensors
// the pointers show (atoms; the last one runs to the end of the segment), each used by its own ops.
TEST(FinishRecording, LargeSegmentHoldingSeveralTensorsBecomesItsTensors) {
  const uint64_t t = 3 * kMiB;
  Recording rec = OneAllocation(20 * kMiB, {{{0, Access::kWrite}},
                                            {{0, Access::kRead}, {t, Access::kWrite}},
                                            {{t, Access::kRead}, {2 * t, Access::kWrite}}});
  CudaApi api;
  auto out = FinishRecording(rec, api, TraceContext{});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->it.buffers.size(), 3u);
  const uint64_t start[] = {0, t, 2 * t}, bytes[] = {t, t, 20 * kMiB - 2 * t};
  for (size_t b = 0; b < 3; ++b) {
    EXPECT_EQ(out->it.buffers[b].bytes, bytes[b]);
    EXPECT_EQ(out->buffers[b].address, 64 * kMiB + start[b]);
    EXPECT_FALSE(out->buffers[b].exact);  // no API stated where a tensor ends
  }
  // Op 1 reads tensor 0 and writes tensor 1; a kernel's write of unknown extent may leave bytes as they were, so
  // it also reads.
  const trace::Op& op1 = out->it.ops[1];
  EXPECT_EQ(op1.reads, (std::vector<trace::BufferId>{0, 1}));
  EXPECT_EQ(op1.writes, (std::vector<trace::BufferId>{1}));
  // A library call writing tensor 1 with its stated extent writes exactly it: no read, and it is exact.
  Recording lib = OneAllocation(20 * kMiB, {{{0, Access::kWrite}},
                                            {{t, Access::kWrite, t}},
                                            {{2 * t, Access::kRead}}});
  lib.ops[1].kind = trace::OpKind::kLibrary;
  auto lout = FinishRecording(lib, api, TraceContext{});
  ASSERT_TRUE(lout.ok()) << lout.status().message();
  ASSERT_EQ(lout->it.buffers.size(), 3u);
  EXPECT_TRUE(lout->it.ops[1].reads.empty());
  EXPECT_EQ(lout->it.ops[1].writes, (std::vector<trace::BufferId>{1}));
  EXPECT_TRUE(lout->buffers[1].exact);
  EXPECT_FALSE(lout->buffers[2].exact);
}

// A library operand whose stated extent covers two of the tensors other ops point at (one pointer, e.g. a fill of
// the whole allocation) is a span: a recompute cannot move one of them to scratch alone.
TEST(FinishRecording, AnOperandCoveringSeveralTensorsIsASpan) {
  const uint64_t t = 3 * kMiB;
  Recording rec = OneAllocation(20 * kMiB, {{{0, Access::kWrite, 2 * t}}, {{0, Access::kRead}}, {{t, Access::kRead}}});
  rec.ops[0].kind = trace::OpKind::kLibrary;
  CudaApi api;
  auto out = FinishRecording(rec, api, TraceContext{});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_GE(out->it.buffers.size(), 2u);
  ASSERT_EQ(out->ops[0].spans.size(), 1u);
  EXPECT_EQ(out->ops[0].spans[0], (std::vector<trace::BufferId>{0, 1}));
  EXPECT_TRUE(out->ops[1].spans.empty());
  EXPECT_TRUE(out->ops[2].spans.empty());
}

// A kernel the profiling iteration saw write all of [offset, offset + written) without reading it
// (RecordedUse::written): its tensor ends there, even short of the next pointer (the bytes between are no buffer),
// and it is exact, as a library call's stated operand is. A kernel seen to update what it changed
// (RecordedUse::updates) does not create the value at its first touch: the buffer is read before it is written.
TEST(FinishRecording, KernelWriteSeenByTheTestEndsItsTensorAndAnUpdateReads) {
  const uint64_t t = 3 * kMiB, w = 2 * kMiB + 4096;
  Recording rec = OneAllocation(20 * kMiB, {{{0, Access::kTouch}, {t, Access::kTouch}},
                                            {{t, Access::kTouch}, {2 * t, Access::kTouch}},
                                            {{2 * t, Access::kTouch}}});
  for (RecordedOp& op : rec.ops) {
    for (RecordedUse& u : op.uses) u.changed = 0;
  }
  rec.ops[0].uses[1].changed = 1;  // op 0 wrote tensor 1's first w bytes, whatever they held
  rec.ops[0].uses[1].written = w;
  rec.ops[1].uses[1].changed = 1;  // op 1 updated tensor 2
  rec.ops[1].uses[1].updates = true;
  CudaApi api;
  auto out = FinishRecording(rec, api, TraceContext{});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->it.buffers.size(), 3u);
  EXPECT_EQ(out->it.buffers[1].bytes, w);
  EXPECT_EQ(out->buffers[1].address, 64 * kMiB + t);
  EXPECT_TRUE(out->buffers[1].exact);
  EXPECT_EQ(out->it.buffers[2].address, 64 * kMiB + 2 * t);  // the bytes from t + w to 2t are no buffer
  EXPECT_FALSE(out->buffers[2].exact);
  EXPECT_EQ(out->it.ops[0].writes, (std::vector<trace::BufferId>{1}));
  EXPECT_EQ(out->it.ops[0].reads, (std::vector<trace::BufferId>{0}));
  EXPECT_EQ(out->it.ops[1].writes, (std::vector<trace::BufferId>{2}));
  EXPECT_EQ(out->it.ops[1].reads, (std::vector<trace::BufferId>{1, 2}));
  ASSERT_EQ(out->ops[0].written.size(), 1u);
  EXPECT_EQ(out->ops[0].written[0], std::make_pair(64 * kMiB + t, w));
  EXPECT_TRUE(out->ops[1].written.empty());
  // Without the test's finding, a first touch that changed carried-over memory is taken as its creation.
  rec.ops[1].uses[1].updates = false;
  auto guessed = FinishRecording(rec, api, TraceContext{});
  ASSERT_TRUE(guessed.ok()) << guessed.status().message();
  EXPECT_EQ(guessed->it.ops[1].reads, (std::vector<trace::BufferId>{1}));
}

// An operand whose extent the API stated is a tensor of its own, and exact, unless the extent skips bytes (a
// GEMM output with ldc above m): the skipped bytes may be another tensor's and keep their values, so it is not
// exact and the write also reads. Bytes no op uses are no buffer.
TEST(FinishRecording, StatedOperandIsExactUnlessItHasGaps) {
  for (const bool gaps : {false, true}) {
    SCOPED_TRACE(gaps ? "with gaps" : "dense");
    Recording rec =
        OneAllocation(8 * kMiB, {{{kMiB, Access::kWrite, 6 * kMiB, gaps}}, {{7 * kMiB, Access::kRead}}});
    rec.ops[0].kind = trace::OpKind::kLibrary;
    CudaApi api;
    auto out = FinishRecording(rec, api, TraceContext{});
    ASSERT_TRUE(out.ok()) << out.status().message();
    ASSERT_EQ(out->buffers.size(), 2u);  // [1, 7) and [7, 8) MiB; nothing uses [0, 1)
    EXPECT_EQ(out->buffers[0].address, 65 * kMiB);
    EXPECT_EQ(out->it.buffers[0].bytes, 6 * kMiB);
    EXPECT_EQ(out->buffers[0].exact, !gaps);
    EXPECT_FALSE(out->buffers[1].exact);
    EXPECT_EQ(out->it.ops[0].writes, (std::vector<trace::BufferId>{0}));
    EXPECT_EQ(out->it.ops[0].reads, gaps ? std::vector<trace::BufferId>{0} : std::vector<trace::BufferId>{});
  }
}

// A caching allocator's small pool (a 2 MiB segment): its tensors are separate buffers.
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
