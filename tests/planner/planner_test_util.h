// Helpers of the planner tests: a profile with round numbers, plan construction, and workload loading.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "policy/hw_profile.h"
#include "policy/plan.h"
#include "policy/simulator.h"
#include "ground/trace/analysis.h"
#include "ground/trace/load.h"
#include "tests/common/trace_samples.h"

namespace karma::testing {

// 1 FLOP takes 1 ns, 1 byte crosses either link in 1 ns, and memory traffic is free: an op with `flops` = n
// runs n ns, and a buffer of n bytes copies in n ns. Schedules can be computed by hand.
inline policy::HwProfile NanosecondProfile() {
  return {.name = "test-ns",
          .description = "1 FLOP/ns, 1 B/ns links",
          .memory_bytes = 1ull << 40,
          .flops_per_s = 1e9,
          .memory_bw = 1e18,
          .copy = {1e9, 1e9},
          .managed = {1e9, 1e9},
          .pageable_bw = 1e9,
          .fault_latency_s = 1e-6,
          .fault_bw = 1e8,
          .kernel_launch_s = 0};
}

inline trace::OpId AddTimedOp(trace::Iteration& it, trace::Phase phase, std::vector<trace::BufferId> reads,
                              std::vector<trace::BufferId> writes, uint64_t ns, const std::string& name = "") {
  return AddOp(it, name.empty() ? "op" + std::to_string(it.ops.size()) : name, phase, std::move(reads),
               std::move(writes), ns, 0);
}

inline policy::Action SwapOut(trace::BufferId b, int32_t after, uint32_t before = trace::kNone, bool keep = false) {
  policy::Action a;
  a.kind = policy::ActionKind::kSwapOut;
  a.buffer = b;
  a.after = after;
  a.before = before;
  a.keep = keep;
  return a;
}
inline policy::Action SwapIn(trace::BufferId b, int32_t after, uint32_t before) {
  policy::Action a;
  a.kind = policy::ActionKind::kSwapIn;
  a.buffer = b;
  a.after = after;
  a.before = before;
  return a;
}
inline policy::Action Discard(trace::BufferId b, int32_t after) {
  policy::Action a;
  a.kind = policy::ActionKind::kDiscard;
  a.buffer = b;
  a.after = after;
  return a;
}
inline policy::Action Recompute(std::vector<trace::OpId> ops, uint32_t before) {
  policy::Action a;
  a.kind = policy::ActionKind::kRecompute;
  a.ops = std::move(ops);
  a.before = before;
  a.after = static_cast<int32_t>(before) - 1;
  return a;
}

inline policy::Plan PlanOf(std::vector<policy::Action> actions) {
  policy::Plan p;
  p.strategy = "test";
  p.actions = std::move(actions);
  return p;
}

// Times in the nanosecond profile, compared exactly up to rounding.
#define EXPECT_NS(seconds, ns) EXPECT_NEAR((seconds) * 1e9, (ns), 1e-6)

inline std::string WorkloadPath(const std::string& name) { return std::string(KARMA_TEST_DATA) + "/" + name; }

inline trace::Iteration LoadOrDie(const std::string& path) {
  auto it = trace::LoadIteration(path);
  EXPECT_TRUE(it.ok()) << it.status().message();
  return it.ok() ? std::move(it).value() : trace::Iteration{};
}

inline uint64_t IdealPeak(const trace::Iteration& it) {
  return trace::IdealMemory(it, trace::ComputeLifetimes(it)).peak_bytes;
}

}  // namespace karma::testing
