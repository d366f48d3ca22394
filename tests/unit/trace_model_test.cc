// Tests of lifetimes, the ideal memory curve, summaries and model validation.
#include <gtest/gtest.h>

#include "runtime/trace/analysis.h"
#include "tests/common/trace_samples.h"

namespace karma::trace {
namespace {

using karma::testing::AddBuffer;
using karma::testing::AddOp;
using karma::testing::TinyMlp;

TEST(Lifetimes, TinyMlpByHand) {
  const Iteration it = TinyMlp();
  const auto lt = ComputeLifetimes(it);
  // params, input and grads are persistent; activations live from producer to last consumer.
  for (BufferId b : {0u, 1u, 2u, 9u, 10u}) EXPECT_TRUE(lt[b].persistent) << b;
  EXPECT_FALSE(lt[3].persistent);
  EXPECT_EQ(lt[3].first, 0u);  // a1: linear ... relu_backward
  EXPECT_EQ(lt[3].last, 5u);
  EXPECT_EQ(lt[4].first, 1u);  // a2: relu ... linear_backward
  EXPECT_EQ(lt[4].last, 4u);
  EXPECT_EQ(lt[7].first, 4u);  // ga2
  EXPECT_EQ(lt[7].last, 5u);
}

TEST(IdealMemory, TinyMlpByHand) {
  const Iteration it = TinyMlp();
  const MemoryCurve m = IdealMemory(it, ComputeLifetimes(it));
  const uint64_t persistent = 400 + 200 + 100 + 400 + 200;
  EXPECT_EQ(m.persistent_bytes, persistent);
  ASSERT_EQ(m.live.size(), it.ops.size());
  EXPECT_EQ(m.live[0], persistent + 1000);                     // a1
  EXPECT_EQ(m.live[1], persistent + 2000);                     // a1, a2
  EXPECT_EQ(m.live[3], persistent + 2000 + 50 + 50);           // a1, a2, y, gy
  EXPECT_EQ(m.live[4], persistent + 2000 + 50 + 1000);         // a1, a2, gy, ga2
  EXPECT_EQ(m.live[5], persistent + 1000 + 1000 + 1000);       // a1, ga2, ga1
  EXPECT_EQ(m.live[7], persistent);
  EXPECT_EQ(m.peak_bytes, persistent + 3050);
  EXPECT_EQ(m.peak_op, 4u);
}

TEST(Lifetimes, ReadBeforeWriteIsPersistentUnlessAllocatedInside) {
  Iteration it;
  const auto a = AddBuffer(it, 10, BufferKind::kOther);        // read first: persistent
  const auto b = AddBuffer(it, 20, BufferKind::kOther);        // written first: transient
  const auto c = AddBuffer(it, 30, BufferKind::kWorkspace);    // never used: persistent (it exists)
  const auto d = AddBuffer(it, 40, BufferKind::kActivation);   // touched first: persistent
  const auto e = AddBuffer(it, 50, BufferKind::kTemp);         // read first but allocated inside: transient
  AddOp(it, "k0", Phase::kForward, {a}, {b});
  Op& op1 = it.ops[AddOp(it, "k1", Phase::kForward, {e}, {})];
  op1.touches = {d};
  it.events.push_back(Event{EventKind::kAlloc, 1, e, 0});
  const auto lt = ComputeLifetimes(it);
  EXPECT_TRUE(lt[a].persistent);
  EXPECT_FALSE(lt[b].persistent);
  EXPECT_TRUE(lt[c].persistent);
  EXPECT_EQ(lt[c].first, kNone);
  EXPECT_TRUE(lt[d].persistent);
  EXPECT_FALSE(lt[e].persistent);
  const MemoryCurve m = IdealMemory(it, lt);
  EXPECT_EQ(m.persistent_bytes, 10u + 30 + 40);
  EXPECT_EQ(m.live[0], 80u + 20);
  EXPECT_EQ(m.live[1], 80u + 50);
}

TEST(IdealMemory, EmptyIteration) {
  Iteration it;
  AddBuffer(it, 64, BufferKind::kParam);
  const MemoryCurve m = IdealMemory(it, ComputeLifetimes(it));
  EXPECT_EQ(m.peak_bytes, 64u);
  EXPECT_EQ(m.peak_op, kNone);
  EXPECT_TRUE(m.live.empty());
}

TEST(Summary, CountsByPhaseAndKind) {
  const Summary s = Summarize(TinyMlp());
  EXPECT_EQ(s.ops_by_phase[static_cast<int>(Phase::kForward)], 3u);
  EXPECT_EQ(s.ops_by_phase[static_cast<int>(Phase::kBackward)], 4u);
  EXPECT_EQ(s.ops_by_phase[static_cast<int>(Phase::kOptimizer)], 2u);
  EXPECT_EQ(s.buffers_by_kind[static_cast<int>(BufferKind::kActivation)].count, 3u);
  EXPECT_EQ(s.buffers_by_kind[static_cast<int>(BufferKind::kActivation)].bytes, 2050u);
  EXPECT_EQ(s.total_flops, 9000u);
}

TEST(Validate, CatchesEveryBrokenInvariant) {
  EXPECT_TRUE(Validate(TinyMlp()).ok());
  {
    Iteration it = TinyMlp();
    it.buffers[2].id = 7;
    EXPECT_EQ(Validate(it).code(), Code::kCorrupt);
  }
  {
    Iteration it = TinyMlp();
    it.ops[3].reads.push_back(99);
    EXPECT_NE(Validate(it).message().find("buffer 99"), std::string::npos);
  }
  {
    Iteration it = TinyMlp();
    it.ops[1].id = 0;
    EXPECT_FALSE(Validate(it).ok());
  }
  {
    Iteration it = TinyMlp();
    it.events = {Event{EventKind::kSync, 5, kNone, 0}, Event{EventKind::kSync, 2, kNone, 0}};
    EXPECT_NE(Validate(it).message().find("out of order"), std::string::npos);
  }
  {
    Iteration it = TinyMlp();
    it.events = {Event{EventKind::kAlloc, 0, kNone, 0}};
    EXPECT_FALSE(Validate(it).ok());
  }
  {
    Iteration it = TinyMlp();
    it.events = {Event{EventKind::kSync, 100, kNone, 0}};
    EXPECT_FALSE(Validate(it).ok());
  }
  {
    Iteration it = TinyMlp();
    it.ops[0].phase = static_cast<Phase>(9);
    EXPECT_FALSE(Validate(it).ok());
  }
}

TEST(Names, RoundTrip) {
  for (int k = 0; k < kBufferKindCount; ++k) {
    BufferKind out{};
    ASSERT_TRUE(ParseBufferKind(Name(BufferKind(k)), &out));
    EXPECT_EQ(static_cast<int>(out), k);
  }
  for (int p = 0; p < kPhaseCount; ++p) {
    Phase out{};
    ASSERT_TRUE(ParsePhase(Name(Phase(p)), &out));
    EXPECT_EQ(static_cast<int>(out), p);
  }
  EXPECT_STREQ(Name(static_cast<OpKind>(200)), "invalid");
  BufferKind k{};
  EXPECT_FALSE(ParseBufferKind("weights", &k));
}

}  // namespace
}  // namespace karma::trace
