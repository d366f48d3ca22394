// MG-WFBP grouping and the schedule of a grouping under the alpha-beta model.
#include "ground/exchange/merge_plan.h"

#include <algorithm>

namespace karma::dp {
namespace {

// Closes the group [first, last]: it starts once its last call is ready and the previous group is done.
GroupSpan Close(std::span<const PlanCall> calls, int first, int last, uint64_t bytes, double previous_end,
                const CostModel& cost) {
  GroupSpan g;
  g.first = first;
  g.last = last;
  g.bytes = bytes;
  g.start_s = std::max(calls[static_cast<size_t>(last)].ready_s, previous_end);
  g.end_s = g.start_s + cost.Time(bytes);
  return g;
}

}  // namespace

std::vector<GroupSpan> PlanGroups(std::span<const PlanCall> calls, const CostModel& cost, uint64_t max_group_bytes) {
  std::vector<GroupSpan> groups;
  if (calls.empty()) return groups;
  double previous_end = 0;
  int first = 0;
  uint64_t bytes = calls[0].bytes;
  for (size_t i = 0; i + 1 < calls.size(); ++i) {
    const PlanCall& cur = calls[i];
    const PlanCall& next = calls[i + 1];
    const double start = std::max(cur.ready_s, previous_end);
    const bool mergeable = !cur.ends_group && next.merge_class == cur.merge_class &&
                           bytes + next.bytes <= max_group_bytes;
    if (mergeable && next.ready_s - start < cost.alpha_s) {
      bytes += next.bytes;
      continue;
    }
    groups.push_back(Close(calls, first, static_cast<int>(i), bytes, previous_end, cost));
    previous_end = groups.back().end_s;
    first = static_cast<int>(i + 1);
    bytes = next.bytes;
  }
  groups.push_back(Close(calls, first, static_cast<int>(calls.size() - 1), bytes, previous_end, cost));
  return groups;
}

std::vector<GroupSpan> ScheduleGroups(std::span<const PlanCall> calls, std::span<const int> group_ends,
                                      const CostModel& cost) {
  std::vector<GroupSpan> groups;
  double previous_end = 0;
  int first = 0;
  for (int last : group_ends) {
    uint64_t bytes = 0;
    for (int i = first; i <= last; ++i) bytes += calls[static_cast<size_t>(i)].bytes;
    groups.push_back(Close(calls, first, last, bytes, previous_end, cost));
    previous_end = groups.back().end_s;
    first = last + 1;
  }
  return groups;
}

}  // namespace karma::dp
