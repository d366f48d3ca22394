// Grouping the gradient allreduces of one iteration into phases with the MG-WFBP merge rule.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ground/exchange/cost_model.h"

namespace karma::dp {

// One allreduce of a round, in the order the application issued it (backward order for gradients).
struct PlanCall {
  uint64_t bytes = 0;
  double ready_s = 0;         // when its data was final, relative to the round's first call
  uint64_t merge_class = 0;   // only consecutive calls of one class can share a buffer (communicator, type, op)
  bool ends_group = false;    // nothing may be merged after it (a blocking call: its caller waits for it)
};

// A run of consecutive calls reduced as one buffer, and when the model expects it to run.
struct GroupSpan {
  int first = 0, last = 0;  // call indices, inclusive
  uint64_t bytes = 0;
  double start_s = 0, end_s = 0;
};

// The MG-WFBP rule (S. Shi, X. Chu, B. Li, "MG-WFBP: Merging Gradients Wisely for Efficient Communication in
// Distributed Deep Learning", IEEE TPDS 32(8), 2021; first as "MG-WFBP: Efficient Data Communication for
// Distributed Synchronous SGD Algorithms", INFOCOM 2019): walking the calls in backward order, the group that
// ends with call i would start at tau_c = max(ready_i, end of the previous group). Call i+1 is merged into it
// when ready_{i+1} - tau_c < alpha: waiting for it costs less than the start-up time a separate allreduce would
// pay (when ready_{i+1} <= tau_c nothing is waited for at all). Otherwise the group is closed and costs
// alpha + beta * bytes. Greedy in one pass, as in the paper, which shows it optimal under this model.
// max_group_bytes bounds a merged buffer (a single call larger than it stays alone).
std::vector<GroupSpan> PlanGroups(std::span<const PlanCall> calls, const CostModel& cost, uint64_t max_group_bytes);

// The model's schedule of fixed groups, given by the index of each group's last call (e.g. one call per group:
// plain wait-free backpropagation), for comparison.
std::vector<GroupSpan> ScheduleGroups(std::span<const PlanCall> calls, std::span<const int> group_ends,
                                      const CostModel& cost);

}  // namespace karma::dp
