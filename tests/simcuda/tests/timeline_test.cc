// Unit tests of an engine's placement of operations on the virtual clock.
#include <gtest/gtest.h>

#include <cmath>

#include "device/timeline.h"

namespace simcuda {
namespace {

TEST(Engine, PlacesEachOperationAtTheEarliestFittingGap) {
  Engine e;
  EXPECT_EQ(e.Reserve(0, 1), 0);   // [0, 1]
  EXPECT_EQ(e.Reserve(5, 1), 5);   // [5, 6]
  EXPECT_EQ(e.Reserve(0, 2), 1);   // [1, 3]
  EXPECT_EQ(e.Reserve(0, 3), 6);   // [3, 5] is too short
  EXPECT_EQ(e.Reserve(0, 2), 3);   // but fits this one
  EXPECT_EQ(e.Reserve(2, 0), 2);   // zero-length operations do not occupy the engine
  EXPECT_EQ(e.last_end(), 9);
  EXPECT_EQ(e.busy_seconds(), 9);
  EXPECT_EQ(e.intervals(), 5u);
}

TEST(Engine, ForgetsIntervalsNothingCanPrecedeAnyMore) {
  Engine e;
  e.Reserve(0, 1);
  e.Reserve(2, 1);
  e.Reserve(10, 1);
  e.Forget(3);
  EXPECT_EQ(e.intervals(), 1u);
  EXPECT_EQ(e.Reserve(3, 2), 3);
  EXPECT_EQ(e.Reserve(3, 7), 11);
  EXPECT_EQ(e.last_end(), 18);
}

TEST(Engine, BoundsItsMemoryWithoutOverlappingOperations) {
  Engine e;
  // Operations with gaps between them, never forgotten: old intervals are merged, never double-booked.
  double last = 0;
  for (int i = 0; i < 200000; ++i) last = e.Reserve(2.0 * i, 1);
  EXPECT_EQ(last, 2.0 * 199999);
  EXPECT_LE(e.intervals(), (1u << 16) + 1);
  // The early gaps were merged away; the first one left is between two later operations.
  const double start = e.Reserve(0, 1);
  EXPECT_GT(start, 60000.0);
  EXPECT_EQ(std::fmod(start, 2.0), 1.0);
}

}  // namespace
}  // namespace simcuda
