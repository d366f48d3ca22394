// The session's configuration, read once from the KARMA_* table, with every problem explained.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/common/env.h"
#include "runtime/common/log.h"
#include "runtime/common/units.h"

namespace karma::rt {

enum class Mode : uint8_t { kAuto = 0, kRecord = 1, kReplay = 2, kUm = 3, kOff = 4 };
const char* ModeName(Mode m);

struct SessionConfig {
  Mode mode = Mode::kAuto;
  Capacity capacity;
  std::string trace_dir = "karma-traces";
  std::string plan_path;
  bool ilp = true;  // KARMA_SOLVER=ilp: improve the heuristic plan with Planner II
  std::string iteration_marker;  // NVTX range name; empty: automatic detection
  uint32_t warmup_iterations = 1;
  uint64_t arena_segment_bytes = 256ull << 20;
  bool live_view = true;
  bool rerun_kernels = true;  // KARMA_RERUN_KERNELS: the run on copies in the recorded iteration
  bool move_threads = false;  // KARMA_MOVE_THREADS: prefetches and evictions from threads of the executor's own
  bool batch_moves = true;    // KARMA_BATCH_MOVES: one batched call per point for prefetches and evictions
  LogLevel log_level = LogLevel::kWarn;
  // Rejected values and inconsistent settings, one sentence each; the session logs them once at start.
  std::vector<std::string> problems;
};

// Invalid values fall back to their defaults (EnvConfig already did that); inconsistent combinations are
// resolved towards doing less: KARMA_MODE=replay without a readable KARMA_PLAN runs as `um`.
SessionConfig ConfigFromEnv(const EnvConfig& env);

}  // namespace karma::rt
