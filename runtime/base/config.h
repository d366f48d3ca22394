// The session's configuration, read once from the KARMA_* table, with every problem explained.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ground/common/env.h"
#include "ground/common/log.h"
#include "ground/common/units.h"

namespace karma::rt {

enum class Mode : uint8_t { kAuto = 0, kRecord = 1, kReplay = 2, kUm = 3, kOff = 4 };
// KARMA_RESIDENCY: which residency layer the plan's moves use (runtime/residency).
enum class ResidencyChoice : uint8_t { kAuto = 0, kCopy = 1, kManaged = 2 };
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
  bool move_threads = true;   // KARMA_MOVE_THREADS: prefetches and evictions from threads of the executor's own
  bool batch_moves = true;    // KARMA_BATCH_MOVES: one batched call per point for prefetches and evictions
  ResidencyChoice residency = ResidencyChoice::kManaged;
  bool per_tensor = true;     // KARMA_ALLOCATORS=per-tensor: frameworks allocate each tensor (AllocatorSwitches)
  LogLevel log_level = LogLevel::kWarn;
  // Rejected values and inconsistent settings, one sentence each; the session logs them once at start.
  std::vector<std::string> problems;
};

// Invalid values fall back to their defaults (EnvConfig already did that); inconsistent combinations are
// resolved towards doing less: KARMA_MODE=replay without a readable KARMA_PLAN runs as `um`.
SessionConfig ConfigFromEnv(const EnvConfig& env);

// Frameworks' device allocators under KARMA (KARMA_ALLOCATORS). A framework that keeps device memory in
// segments of its own (PyTorch's caching allocator, TensorFlow's BFC allocator, JAX's preallocated pool) hands a
// dead tensor's memory to the next one with no call KARMA sees: KARMA then sees only segments, each one buffer of
// the plan, kept whole. Each framework has a switch to one allocation per tensor, freed when the tensor dies; KARMA
// sets it at load, before the framework reads it (a Python application's import, well after libkarma.so's
// constructor; a program linked against the framework's library may read it before).
struct AllocatorSwitch {
  const char* framework;
  std::vector<const char*> names;  // the variables that carry the setting (the first the newer name)
  const char* value;  // what KARMA sets all of them to; an application's value that contains it selects it too
};
// PyTorch (2.9 and later read PYTORCH_ALLOC_CONF, earlier versions PYTORCH_CUDA_ALLOC_CONF), TensorFlow, JAX.
const std::vector<AllocatorSwitch>& AllocatorSwitches();
struct AllocatorChoice {
  std::vector<std::string> set;  // NAME=VALUE for each variable set
  std::string note;              // what was done or left, for the session's log (empty: nothing to say)
};
// Sets each switch's variables through `set` when the configuration plans (auto, record, replay), KARMA_ALLOCATORS
// is per-tensor and the application set none of that switch's variables (`get` reads the environment); a switch
// the application set stays as it is.
AllocatorChoice ChooseAllocators(const SessionConfig& config, const EnvConfig::Getter& get,
                                 const std::function<void(const char*, const char*)>& set);
// The choice libkarma.so made at load (ApplyAllocatorsAtLoad), for the session's log.
const AllocatorChoice& AllocatorsAtLoad();
// Called once from libkarma.so's constructor, while the process is single-threaded: reads the KARMA_* variables
// and sets the frameworks' through setenv.
void ApplyAllocatorsAtLoad();

}  // namespace karma::rt
