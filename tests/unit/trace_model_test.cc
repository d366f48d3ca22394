// Tests of lifetimes, the ideal memory curve, summaries and model validation.
#include <gtest/gtest.h>

#include "ground/trace/analysis.h"
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

TEST(HeldMemory, BuffersTheApplicationFreesLateStayUntilTheFree) {
  // TinyMlp with alloc events for its activations: a1 freed at once after its last use (op 5), a2 only before op 7
  // (last used by op 4), y never freed inside the iteration (last used by op 3); ga2 has no alloc event (memory the
  // application keeps) and counts as in the ideal curve.
  Iteration it = TinyMlp();
  const uint64_t persistent = 400 + 200 + 100 + 400 + 200;
  for (BufferId b : {3u, 4u, 5u}) it.events.push_back(Event{EventKind::kAlloc, 0, b, 0});
  it.events.push_back(Event{EventKind::kFreeRequested, 6, 3, 0});
  it.events.push_back(Event{EventKind::kFreeRequested, 7, 4, 0});
  const auto lt = ComputeLifetimes(it);
  const MemoryCurve ideal = IdealMemory(it, lt);
  const HeldMemoryCurve held = HeldMemory(it, lt);
  EXPECT_EQ(held.late_buffers, 2u);
  EXPECT_EQ(held.held_until[3], kNone);  // a1: freed right after its last use
  EXPECT_EQ(held.held_until[4], 6u);     // a2: freed before op 7
  EXPECT_EQ(held.held_until[5], 8u);     // y: to the end
  EXPECT_EQ(held.held_until[7], kNone);  // ga2: no alloc event
  ASSERT_EQ(held.memory.live.size(), it.ops.size());
  EXPECT_EQ(held.memory.live[3], ideal.live[3]);              // nothing is late yet
  EXPECT_EQ(held.memory.live[4], ideal.live[4] + 50);         // y past its last use
  EXPECT_EQ(held.memory.live[5], ideal.live[5] + 1000 + 50);  // and a2
  EXPECT_EQ(held.memory.live[6], ideal.live[6] + 1000 + 50);
  EXPECT_EQ(held.memory.live[7], persistent + 50);            // a2 freed; y to the end
  EXPECT_EQ(held.memory.live[8], persistent + 50);
  EXPECT_EQ(held.most_late_bytes, 1050u);
  EXPECT_EQ(held.memory.peak_bytes, persistent + 1000 + 1000 + 1000 + 1050);
  EXPECT_EQ(held.memory.peak_op, 5u);
  // A free right after the last use changes nothing; nor does an iteration without alloc events.
  Iteration prompt = TinyMlp();
  prompt.events.push_back(Event{EventKind::kAlloc, 0, 4, 0});
  prompt.events.push_back(Event{EventKind::kFreeRequested, 5, 4, 0});
  const HeldMemoryCurve h = HeldMemory(prompt, ComputeLifetimes(prompt));
  EXPECT_EQ(h.late_buffers, 0u);
  EXPECT_EQ(h.most_late_bytes, 0u);
  EXPECT_EQ(h.memory.live, IdealMemory(prompt, ComputeLifetimes(prompt)).live);
  const Iteration plain = TinyMlp();
  EXPECT_EQ(HeldMemory(plain, ComputeLifetimes(plain)).memory.live, IdealMemory(plain, ComputeLifetimes(plain)).live);
  const Summary s = Summarize(it);
  EXPECT_EQ(s.held.memory.peak_bytes, held.memory.peak_bytes);
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
