// The alpha-beta cost model of one allreduce (time = alpha + beta * bytes) and its fit from measurements.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ground/common/status.h"

namespace karma::dp {

struct CostModel {
  double alpha_s = 0;          // start-up time of one allreduce, seconds
  double beta_s_per_byte = 0;  // seconds per byte of the reduced buffer
  double Time(uint64_t bytes) const { return alpha_s + beta_s_per_byte * static_cast<double>(bytes); }
  std::string ToString() const;  // "alpha 12.3 us, 4.56 GB/s"
};

struct CostSample {
  uint64_t bytes = 0;
  double seconds = 0;
};

// Least squares over the samples. Noise can make the fitted intercept or slope negative; both are clamped at
// zero (the model only ranks merge decisions, and a negative start-up cost would never merge anything).
// Needs two distinct sizes.
Result<CostModel> FitCostModel(std::span<const CostSample> samples);

// KARMA_MPI_COST: "ALPHA_US,GBPS", e.g. "20,5" for 20 microseconds of start-up and 5 GB/s.
Result<CostModel> ParseCostModel(std::string_view text);

}  // namespace karma::dp
