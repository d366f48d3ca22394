// Iteration detection: clean periods, warm-up, repeated sub-sequences, noise, divergent iterations.
#include "runtime/observe/detector.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

namespace karma::rt {
namespace {

using Step = IterationDetector::Step;

// One iteration of `n` distinct ops starting with signature `base`, with live memory lowest at its first op.
struct Iter {
  std::vector<uint64_t> sigs;
  std::vector<uint64_t> live;
};
Iter Distinct(uint64_t base, size_t n) {
  Iter it;
  for (size_t j = 0; j < n; ++j) {
    it.sigs.push_back(base + j);
    it.live.push_back(1000 + 10 * (j < n / 2 ? j : n - j));
  }
  return it;
}

struct Feeder {
  IterationDetector d;
  std::vector<uint64_t> boundaries;  // op indices that started an iteration
  std::vector<uint64_t> stable_boundaries;
  uint64_t diverged = 0;
  explicit Feeder(IterationDetector::Options o = {}) : d(o) {}
  void Feed(const Iter& it) {
    for (size_t j = 0; j < it.sigs.size(); ++j) Op(it.sigs[j], it.live[j]);
  }
  void Op(uint64_t sig, uint64_t live, bool launch = true) {
    const uint64_t index = d.ops();
    const Step s = d.Observe(sig, live, false, launch);
    if (s == Step::kBoundary) {
      boundaries.push_back(index);
      if (d.stable()) stable_boundaries.push_back(index);
    }
    if (s == Step::kDiverged) diverged++;
  }
};

TEST(DetectorTest, CleanPeriodLocksOnTheIterationStart) {
  Feeder r;
  const Iter it = Distinct(1000, 50);
  for (int i = 0; i < 8; ++i) r.Feed(it);
  ASSERT_TRUE(r.d.locked());
  EXPECT_EQ(r.d.period(), 50u);
  ASSERT_FALSE(r.boundaries.empty());
  for (uint64_t b : r.boundaries) EXPECT_EQ(b % 50, 0u) << b;
  // Found after two iterations, the first boundary is the third iteration's start.
  EXPECT_EQ(r.boundaries.front(), 100u);
  // Stable after surviving confirm_periods iterations.
  ASSERT_FALSE(r.stable_boundaries.empty());
  EXPECT_EQ(r.stable_boundaries.front(), 200u);
  EXPECT_EQ(r.diverged, 0u);
}

TEST(DetectorTest, ASynchronizationBreaksTiesInLiveMemory) {
  Feeder r;
  for (int i = 0; i < 6; ++i) {
    for (uint64_t j = 0; j < 20; ++j) {
      const uint64_t index = r.d.ops();
      const Step s = r.d.Observe(500 + j, 4096, /*after_sync=*/j == 7);
      if (s == Step::kBoundary) r.boundaries.push_back(index);
    }
  }
  ASSERT_FALSE(r.boundaries.empty());
  for (uint64_t b : r.boundaries) EXPECT_EQ(b % 20, 7u);
}

TEST(DetectorTest, WarmUpIterationsAreSkipped) {
  Feeder r;
  Iter warm = Distinct(1, 73);  // a first iteration that allocates and launches differently
  r.Feed(warm);
  const Iter it = Distinct(1000, 40);
  for (int i = 0; i < 8; ++i) r.Feed(it);
  ASSERT_TRUE(r.d.locked());
  EXPECT_EQ(r.d.period(), 40u);
  for (uint64_t b : r.boundaries) EXPECT_EQ((b - 73) % 40, 0u) << b;
  EXPECT_EQ(r.boundaries.front(), 73u + 80u);
}

TEST(DetectorTest, RepeatedIdenticalOpsBelowTheMinimumPeriodAreNotIterations) {
  Feeder r;
  for (int i = 0; i < 100; ++i) r.Op(7, 0);
  EXPECT_FALSE(r.d.locked());
}

// Gradient accumulation: micro-steps with identical signatures, then an optimizer step. The micro-step period
// locks first but diverges at the optimizer before it is stable; the full step wins.
void MicroSteps(int micro) {
  Feeder r;
  const Iter m = Distinct(100, 10);
  const Iter opt = Distinct(900, 6);
  for (int step = 0; step < 12; ++step) {
    for (int k = 0; k < micro; ++k) r.Feed(m);
    r.Feed(opt);
  }
  const uint64_t full = 10u * micro + 6;
  ASSERT_TRUE(r.d.locked());
  EXPECT_EQ(r.d.period(), full);
  EXPECT_TRUE(r.d.stable());
  ASSERT_FALSE(r.stable_boundaries.empty());
  for (uint64_t b : r.stable_boundaries) EXPECT_EQ(b % full, 0u) << b;
}
// Signatures that cannot tell identical layers apart (shapes alone, for an allocator that moves tensors): a
// stack of eight identical layers repeats for long enough to look stable. Asking for a synchronization inside the
// period (the loss read once per iteration) leaves only the iteration.
TEST(DetectorTest, ASynchronizationInsideThePeriodTellsTheIterationFromARepeatedLayer) {
  const Iter layer = Distinct(100, 6);
  const Iter head = Distinct(900, 5);
  auto feed = [&](Feeder& r) {
    for (int it = 0; it < 10; ++it) {
      for (int l = 0; l < 8; ++l) r.Feed(layer);
      for (size_t j = 0; j < head.sigs.size(); ++j) {
        const uint64_t index = r.d.ops();
        const Step s = r.d.Observe(head.sigs[j], head.live[j], /*after_sync=*/j == 4);
        if (s == Step::kBoundary) r.boundaries.push_back(index);
        if (s == Step::kBoundary && r.d.stable()) r.stable_boundaries.push_back(index);
      }
    }
  };
  Feeder plain;
  feed(plain);
  EXPECT_GT(plain.d.divergences(), 0u);  // the layer locked, and diverged at the head
  IterationDetector::Options o;
  o.require_sync = true;
  Feeder synced(o);
  feed(synced);
  ASSERT_TRUE(synced.d.locked());
  EXPECT_EQ(synced.d.period(), 8u * 6 + 5);
  EXPECT_EQ(synced.d.divergences(), 0u);
  ASSERT_GE(synced.stable_boundaries.size(), 2u);
  for (size_t k = 1; k < synced.stable_boundaries.size(); ++k) {
    EXPECT_EQ(synced.stable_boundaries[k] - synced.stable_boundaries[k - 1], 8u * 6 + 5);
  }
}

// A data-parallel program waits for each layer's gradient before exchanging it: every layer of the backward pass
// synchronizes, so a layer satisfies require_sync and locks before the iteration does. Once its replay kept
// diverging and it is rejected, detection finds the iteration, also when the iteration's length is a multiple of the
// layer's (two layers, also a multiple, break where one does and are not taken).
void LayersThatSynchronize(size_t head_ops) {
  IterationDetector::Options o;
  o.require_sync = true;
  const Iter layer = Distinct(100, 4);
  const Iter head = Distinct(900, head_ops);
  const uint64_t full = 8 * 4 + head_ops;
  std::set<uint64_t> stable_periods;
  auto feed = [&](Feeder& r, int iterations) {
    for (int it = 0; it < iterations; ++it) {
      for (size_t j = 0; j < head.sigs.size(); ++j) r.Op(head.sigs[j], head.live[j]);
      for (int l = 0; l < 8; ++l) {
        for (size_t j = 0; j < layer.sigs.size(); ++j) {
          const uint64_t index = r.d.ops();
          const Step s = r.d.Observe(layer.sigs[j], layer.live[j], /*after_sync=*/j == 0);
          if (s == Step::kBoundary) r.boundaries.push_back(index);
          if (s == Step::kBoundary && r.d.stable()) {
            r.stable_boundaries.push_back(index);
            stable_periods.insert(r.d.period());
          }
        }
      }
    }
  };
  Feeder r(o);
  feed(r, 3);
  EXPECT_EQ(stable_periods, std::set<uint64_t>{4});  // a layer, stable within each backward pass
  EXPECT_GT(r.d.divergences(), 0u);                   // and broken at each head
  r.d.Reject(4);
  r.d.Reset();
  r.stable_boundaries.clear();
  feed(r, 6);
  ASSERT_TRUE(r.d.locked());
  EXPECT_EQ(r.d.period(), full);
  EXPECT_TRUE(r.d.stable());
  EXPECT_EQ(r.d.divergences(), 0u);
  ASSERT_GE(r.stable_boundaries.size(), 2u);
  for (size_t k = 1; k < r.stable_boundaries.size(); ++k) {
    EXPECT_EQ(r.stable_boundaries[k] - r.stable_boundaries[k - 1], full);
  }
}
TEST(DetectorTest, ARejectedLayerGivesWayToTheIteration) { LayersThatSynchronize(5); }
TEST(DetectorTest, ARejectedLayerGivesWayToAnIterationOfAMultipleOfItsLength) { LayersThatSynchronize(4); }

// A period rejected because the application changed its iteration (same length, new shapes) is found again once
// the rejection has run out and nothing else locked.
TEST(DetectorTest, ARejectionRunsOut) {
  Feeder r;
  const Iter it = Distinct(100, 20);
  r.d.Reject(20);
  r.d.Reset();
  for (int k = 0; k < 300; ++k) r.Feed(it);
  ASSERT_TRUE(r.d.locked());
  EXPECT_EQ(r.d.period(), 20u);
  ASSERT_FALSE(r.boundaries.empty());
  EXPECT_GE(r.boundaries.front(), 16u * 20 + 4096);
}

TEST(DetectorTest, TwoMicroStepsThenAnOptimizerStep) { MicroSteps(2); }
TEST(DetectorTest, FourMicroStepsThenAnOptimizerStep) { MicroSteps(4); }

TEST(DetectorTest, RareNoiseDelaysButDoesNotPreventDetection) {
  Feeder r;
  const Iter it = Distinct(1000, 60);
  std::mt19937 rng(7);
  std::set<uint64_t> starts;
  for (int i = 0; i < 40; ++i) {
    starts.insert(r.d.ops());
    r.Feed(it);
    if (i % 9 == 4) r.Op(5000 + rng() % 1000, 2000);  // a logging kernel now and then
  }
  ASSERT_TRUE(r.d.locked());
  EXPECT_EQ(r.d.period(), 60u);
  ASSERT_FALSE(r.stable_boundaries.empty());
  for (uint64_t b : r.stable_boundaries) EXPECT_EQ(starts.count(b), 1u) << b;
}

TEST(DetectorTest, SmallSubstitutionsAreToleratedWithinAPeriod) {
  Feeder r;
  Iter it = Distinct(1000, 300);  // tolerance 1%: up to 3 differing ops per iteration
  for (int i = 0; i < 6; ++i) r.Feed(it);
  ASSERT_TRUE(r.d.stable());
  Iter varied = it;
  varied.sigs[100] = 77777;
  varied.sigs[200] = 88888;
  r.Feed(varied);
  r.Feed(it);
  EXPECT_EQ(r.diverged, 0u);
  EXPECT_TRUE(r.d.locked());
}

TEST(DetectorTest, ADivergentIterationDropsTheLockWhichReturnsLater) {
  Feeder r;
  const Iter it = Distinct(1000, 50);
  for (int i = 0; i < 6; ++i) r.Feed(it);
  ASSERT_TRUE(r.d.stable());
  const size_t before = r.stable_boundaries.size();
  r.Feed(Distinct(7000, 35));  // an evaluation pass
  EXPECT_EQ(r.diverged, 1u);
  EXPECT_EQ(r.d.divergences(), 1u);
  for (int i = 0; i < 10; ++i) r.Feed(it);
  ASSERT_TRUE(r.d.locked());
  EXPECT_EQ(r.d.period(), 50u);
  ASSERT_GT(r.stable_boundaries.size(), before);
  for (size_t i = before; i < r.stable_boundaries.size(); ++i) {
    EXPECT_EQ((r.stable_boundaries[i] - 35) % 50, 0u) << r.stable_boundaries[i];
  }
}

TEST(DetectorTest, PeriodsWhoseOpsAllRepeatWithinTheIterationAreFound) {
  // A A B B A B: no op occurs once per iteration, so the last occurrence alone never proposes 6.
  Feeder r;
  const uint64_t pattern[] = {1, 1, 2, 2, 1, 2};
  const uint64_t live[] = {0, 5, 6, 7, 8, 9};
  for (int i = 0; i < 12; ++i) {
    for (int j = 0; j < 6; ++j) r.Op(pattern[j], live[j]);
  }
  ASSERT_TRUE(r.d.locked());
  EXPECT_EQ(r.d.period(), 6u);
}

TEST(DetectorTest, ASetUpLoopOfCopiesIsNotTheIteration) {
  // Uploading weights tensor after tensor (three copies per tensor, many tensors) repeats long before training
  // starts; its period has no launch, so the training iteration is the one found.
  Feeder r;
  for (int t = 0; t < 60; ++t) {
    for (uint64_t j = 0; j < 6; ++j) r.Op(900 + j, 100 * static_cast<uint64_t>(t), /*launch=*/false);
  }
  EXPECT_FALSE(r.d.locked());
  Iter it = Distinct(1000, 30);
  for (int i = 0; i < 6; ++i) {
    for (size_t j = 0; j < it.sigs.size(); ++j) r.Op(it.sigs[j], it.live[j], /*launch=*/j % 3 != 0);
  }
  ASSERT_TRUE(r.d.locked());
  EXPECT_EQ(r.d.period(), 30u);
  for (uint64_t b : r.boundaries) EXPECT_EQ((b - 360) % 30, 0u) << b;
}

TEST(DetectorTest, CandidatesStayBounded) {
  IterationDetector::Options o;
  o.max_candidates = 8;
  Feeder r(o);
  std::mt19937 rng(3);
  for (int i = 0; i < 20000; ++i) r.Op(rng() % 50, 0);  // random: many distances, no period
  EXPECT_LE(r.d.candidate_count(), 8u);
  EXPECT_FALSE(r.d.stable());
}

}  // namespace
}  // namespace karma::rt
