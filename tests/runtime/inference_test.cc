// Phase and buffer-kind inference on a hand-made recorded iteration (trace/inference.h).
#include "ground/trace/inference.h"

#include <gtest/gtest.h>

namespace karma::trace {
namespace {

// A two-layer training step as a recorder sees it: every phase unknown, every buffer `other`.
//   buffers: 0 w1, 1 w2 (persistent weights), 2 g1, 3 g2 (persistent gradients), 4 m1 (momentum), 5 x, 6 a1,
//   7 a2, 8 dy, 9 d1 (allocated and freed inside; activations 8 MiB, gradients of activations 4 MiB)
//   ops: 0 copy x; 1 fwd1 (x, w1 -> a1); 2 fwd2 (a1, w2 -> a2); 3 loss (a2 -> dy); 4 bwd2 (dy, a1, w2 -> d1, g2);
//   5 bwd1 (d1, x -> g1); 6 sgd w1 (g1, m1 -> w1, m1); 7 sgd w2 (g2 -> w2); 8 copy w2 back to the host
Iteration TwoLayers() {
  Iteration it;
  it.model = "two_layers";
  const uint64_t sizes[] = {4096, 4096, 4096, 4096, 4096, 1 << 20, 8 << 20, 8 << 20, 4 << 20, 4 << 20};
  for (uint32_t b = 0; b < 10; ++b) {
    Buffer buf;
    buf.id = b;
    buf.bytes = sizes[b];
    buf.kind = BufferKind::kOther;
    it.buffers.push_back(buf);
  }
  auto op = [&](const char* name, OpKind kind, std::vector<BufferId> reads, std::vector<BufferId> writes) {
    Op o;
    o.id = static_cast<OpId>(it.ops.size());
    o.name = name;
    o.kind = kind;
    o.reads = std::move(reads);
    o.writes = std::move(writes);
    o.duration_ns = 1000;
    it.ops.push_back(std::move(o));
  };
  op("memcpy HtoD", OpKind::kCopy, {}, {5});
  op("fwd1", OpKind::kKernel, {5, 0}, {6});
  op("fwd2", OpKind::kKernel, {6, 1}, {7});
  op("loss", OpKind::kKernel, {7}, {8});
  op("bwd2", OpKind::kKernel, {8, 6, 1}, {9, 3});
  op("bwd1", OpKind::kKernel, {9, 5}, {2});
  op("sgd", OpKind::kKernel, {2, 4, 0}, {0, 4});
  op("sgd", OpKind::kKernel, {3, 1}, {1});
  op("memcpy DtoH", OpKind::kCopy, {1}, {});
  auto event = [&](EventKind k, uint32_t before, BufferId b) { it.events.push_back({k, before, b, 0}); };
  event(EventKind::kAlloc, 0, 5);
  event(EventKind::kAlloc, 1, 6);
  event(EventKind::kAlloc, 2, 7);
  event(EventKind::kAlloc, 3, 8);
  event(EventKind::kFreeRequested, 4, 7);
  event(EventKind::kAlloc, 4, 9);
  event(EventKind::kFreeRequested, 5, 8);
  event(EventKind::kFreeRequested, 5, 6);
  event(EventKind::kFreeRequested, 6, 5);
  event(EventKind::kFreeRequested, 6, 9);
  return it;
}

TEST(InferenceTest, SplitsAtThePeakAndAfterTheLastActivationUse) {
  Iteration it = TwoLayers();
  InferPhases(it);
  // Live memory peaks at the loss (x, a1, a2 and dy alive; a2 dies there), so the forward pass ends with it.
  for (int i = 0; i <= 3; ++i) EXPECT_EQ(it.ops[i].phase, Phase::kForward) << i;
  EXPECT_EQ(it.ops[4].phase, Phase::kBackward);
  EXPECT_EQ(it.ops[5].phase, Phase::kBackward);
  // No activation is used after bwd1: the optimizer, with the trailing copy.
  for (int i = 6; i <= 8; ++i) EXPECT_EQ(it.ops[i].phase, Phase::kOptimizer) << i;

  InferKinds(it);
  EXPECT_EQ(it.buffers[0].kind, BufferKind::kParam);  // read forward, written by the optimizer
  EXPECT_EQ(it.buffers[1].kind, BufferKind::kParam);
  EXPECT_EQ(it.buffers[2].kind, BufferKind::kGrad);   // written backward, read by the optimizer
  EXPECT_EQ(it.buffers[3].kind, BufferKind::kGrad);
  EXPECT_EQ(it.buffers[4].kind, BufferKind::kState);  // only the optimizer touches it
  EXPECT_EQ(it.buffers[6].kind, BufferKind::kOther);  // not persistent: left as it was
}

TEST(InferenceTest, KeepsPhasesTheApiGave) {
  Iteration it = TwoLayers();
  it.ops[3].phase = Phase::kBackward;
  InferPhases(it);
  EXPECT_EQ(it.ops[0].phase, Phase::kUnknown);
  EXPECT_EQ(it.ops[6].phase, Phase::kUnknown);
}

}  // namespace
}  // namespace karma::trace
