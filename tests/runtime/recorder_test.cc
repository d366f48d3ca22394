// Turning a recording into a trace: one buffer per allocation, and the directions of its ops' operands.
#include <gtest/gtest.h>

#include "runtime/observe/recorder.h"

namespace karma::rt {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// Ops that each pass pointers at the given offsets of one arena allocation (kernel arguments: extent unknown;
// `extent` for library operands, copies and memsets), with what a probe saw (`changed`: -1 not probed).
struct Use {
  uint64_t offset;
  Access access;
  uint64_t extent = 0;
  bool gaps = false;
  int8_t changed = -1;
};

// One arena allocation of `size` bytes at 64 MiB: made before the iteration and kept, or (`inside`) allocated
// before op 0 and freed after the last op.
void OneAllocation(Recording& rec, uint64_t size, const std::vector<std::vector<Use>>& ops,
                   trace::OpKind kind = trace::OpKind::kKernel, bool inside = false) {
  BufferEntry e;
  e.start = 64 * kMiB;
  e.size = size;
  e.serial = 7;
  e.origin = Origin::kArena;
  RecordedBuffer& rb = rec.Buffer(e);
  if (inside) {
    rb.allocated_inside = rb.freed_inside = true;
    rb.alloc_ordinal = 0;
    rec.allocations = 1;
    rec.AddEvent(trace::EventKind::kAlloc, e.serial);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    RecordedOp& op = rec.ops.emplace_back();
    op.kind = kind;
    op.name = "k" + std::to_string(i);
    for (const Use& u : ops[i]) {
      op.uses.push_back(RecordedUse{e.serial, u.offset, u.extent, u.access, u.changed});
      op.uses.back().gaps = u.gaps;
    }
    op.state.store(RecordedOp::kDone);
  }
  if (inside) rec.AddEvent(trace::EventKind::kFreeRequested, e.serial);
}

std::vector<trace::BufferId> Ids(std::initializer_list<trace::BufferId> ids) { return ids; }

// A caching allocator's 20 MiB segment holding 3 MiB tensors back to back: one buffer, whatever offsets the
// pointers show, never exact (KARMA cannot tell where its tensors are or when they die). Kernels' uses of it are
// touches unless a probe saw the kernel leave it as it was (a read) or change it (a read-write).
TEST(FinishRecording, ASegmentHoldingSeveralTensorsIsOneBuffer) {
  const uint64_t t = 3 * kMiB;
  Recording rec;
  OneAllocation(rec, 20 * kMiB,
                {{{0, Access::kTouch}}, {{0, Access::kTouch, 0, false, 0}, {t, Access::kTouch}},
                 {{t, Access::kTouch, 0, false, 1}, {2 * t, Access::kTouch, 0, false, 1}}});
  CudaApi api;
  auto out = FinishRecording(rec, api, TraceContext{});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->it.buffers.size(), 1u);
  EXPECT_EQ(out->it.buffers[0].bytes, 20 * kMiB);
  EXPECT_EQ(out->buffers[0].address, 64 * kMiB);
  EXPECT_FALSE(out->buffers[0].exact);
  EXPECT_EQ(out->it.ops[0].touches, Ids({0}));  // not probed: carried over, so not created by its first use
  EXPECT_TRUE(out->it.ops[0].writes.empty());
  // Op 1: one use read it, the other was not probed: the directions combine.
  EXPECT_EQ(out->it.ops[1].reads, Ids({0}));
  EXPECT_TRUE(out->it.ops[1].writes.empty());
  EXPECT_EQ(out->it.ops[2].reads, Ids({0}));
  EXPECT_EQ(out->it.ops[2].writes, Ids({0}));
}

// One tensor per allocation, made and freed inside the iteration: exact. The first kernel that touches it writes
// it (it held nothing before); a later kernel the probe saw leave it unchanged reads it.
TEST(FinishRecording, AnAllocationMadeAndFreedInsideIsExactAndItsFirstKernelWritesIt) {
  Recording rec;
  OneAllocation(rec, 4 * kMiB, {{{0, Access::kTouch}}, {{1024, Access::kTouch, 0, false, 0}}},
                trace::OpKind::kKernel, true);
  CudaApi api;
  auto out = FinishRecording(rec, api, TraceContext{});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->it.buffers.size(), 1u);
  EXPECT_TRUE(out->buffers[0].exact);
  EXPECT_TRUE(out->buffers[0].allocated_inside);
  EXPECT_EQ(out->it.ops[0].writes, Ids({0}));
  EXPECT_TRUE(out->it.ops[0].touches.empty());
  EXPECT_EQ(out->it.ops[1].reads, Ids({0}));
  EXPECT_TRUE(out->it.ops[1].writes.empty());
  EXPECT_EQ(out->it.buffers[0].kind, trace::BufferKind::kTemp);  // used by two adjacent ops
  ASSERT_EQ(out->it.events.size(), 2u);
  EXPECT_EQ(out->it.events[0].buffer, 0u);
  EXPECT_EQ(out->it.events[1].kind, trace::EventKind::kFreeRequested);
}

// A copy, memset or library call that writes the whole allocation (allocator rounding aside) creates its value;
// one that writes part of it, or skips bytes of its extent, leaves the rest as it was: a read-write.
TEST(FinishRecording, AStatedWriteOfPartOfAnAllocationAlsoReadsIt) {
  struct Case {
    Use use;
    bool pure;
  };
  const Case cases[] = {
      {{0, Access::kWrite, 8 * kMiB}, true},
      {{0, Access::kWrite, 8 * kMiB - 256}, true},  // the allocator rounded the request up
      {{0, Access::kWrite, 6 * kMiB}, false},
      {{kMiB, Access::kWrite, 7 * kMiB}, false},
      {{0, Access::kWrite, 8 * kMiB, true}, false},
  };
  for (const Case& c : cases) {
    Recording rec;
    OneAllocation(rec, 8 * kMiB, {{c.use}, {{0, Access::kRead, 8 * kMiB}}}, trace::OpKind::kCopy);
    CudaApi api;
    auto out = FinishRecording(rec, api, TraceContext{});
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out->it.ops[0].writes, Ids({0}));
    EXPECT_EQ(out->it.ops[0].reads.empty(), c.pure) << c.use.offset << " " << c.use.extent << " " << c.use.gaps;
  }
}

// Fake events: an op's start and end events are numbers, and the time between them is their difference in ms.
cudaError_t FakeSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t FakeElapsed(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = static_cast<float>(reinterpret_cast<uintptr_t>(end) - reinterpret_cast<uintptr_t>(start));
  return cudaSuccess;
}

// An op whose buffers were partly in host memory when it ran (the copy path before a plan: its time is the host
// link's) takes the median duration measured for the ops of its shape that ran on the device; an op of a shape
// nobody measured keeps none, for the cost model to estimate.
TEST(FinishRecording, AnOpOffTheDeviceTakesTheDurationMeasuredForItsShape) {
  Recording rec;
  OneAllocation(rec, 4 * kMiB, {{{0, Access::kTouch}}, {{0, Access::kTouch}}, {{0, Access::kTouch}},
                                {{0, Access::kTouch}}, {{0, Access::kTouch}}});
  const struct {
    uint64_t shape;
    uintptr_t ms;
    bool off_device;
  } ops[] = {{1, 3, false}, {1, 5, false}, {1, 40, true}, {2, 50, true}, {1, 4, false}};
  for (size_t i = 0; i < rec.ops.size(); ++i) {
    rec.ops[i].shape = ops[i].shape;
    rec.ops[i].start = reinterpret_cast<cudaEvent_t>(uintptr_t{0x1000});
    rec.ops[i].end = reinterpret_cast<cudaEvent_t>(0x1000 + ops[i].ms);
    rec.ops[i].off_device = ops[i].off_device;
  }
  CudaApi api;
  api.cudaEventSynchronize = FakeSynchronize;
  api.cudaEventElapsedTime = FakeElapsed;
  auto out = FinishRecording(rec, api, TraceContext{});
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->it.ops.size(), 5u);
  EXPECT_EQ(out->it.ops[0].duration_ns, 3'000'000u);
  EXPECT_EQ(out->it.ops[2].duration_ns, 4'000'000u);  // the median of 3, 5 and 4 ms, not the 40 it took
  EXPECT_EQ(out->it.ops[3].duration_ns, 0u);          // no op of its shape ran on the device
}

}  // namespace
}  // namespace karma::rt
