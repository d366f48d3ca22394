// The session's configuration, read once from the KARMA_* table, with every problem explained.
#pragma once

#include <cstdint>
#include <functional>
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
  bool move_threads = true;   // KARMA_MOVE_THREADS: prefetches and evictions from threads of the executor's own
  bool batch_moves = true;    // KARMA_BATCH_MOVES: one batched call per point for prefetches and evictions
  bool torch_async = true;    // KARMA_TORCH_ALLOCATOR=async: PyTorch allocates each tensor with cudaMallocAsync
  LogLevel log_level = LogLevel::kWarn;
  // Rejected values and inconsistent settings, one sentence each; the session logs them once at start.
  std::vector<std::string> problems;
};

// Invalid values fall back to their defaults (EnvConfig already did that); inconsistent combinations are
// resolved towards doing less: KARMA_MODE=replay without a readable KARMA_PLAN runs as `um`.
SessionConfig ConfigFromEnv(const EnvConfig& env);

// PyTorch's CUDA allocator under KARMA (KARMA_TORCH_ALLOCATOR). Its default, the caching allocator, keeps the
// memory of dead tensors and hands it to later ones with no call KARMA sees, so KARMA cannot tell a dead value
// from a live one: it evicts dead values over the host link (on an H100 much of the replay's transfers,
// docs/gpu-results.md). With backend:cudaMallocAsync every tensor is a cudaMallocAsync and its free a
// cudaFreeAsync, which discards its pages. PyTorch reads the setting once, when its CUDA library loads (a Python
// application's `import torch`, well after libkarma.so's constructor; a program linked against libtorch may read
// it before): PyTorch 2.9 and later read PYTORCH_ALLOC_CONF, earlier versions PYTORCH_CUDA_ALLOC_CONF.
inline constexpr const char* kTorchAsyncBackend = "backend:cudaMallocAsync";
struct TorchAllocatorChoice {
  bool set = false;   // both variables were set to kTorchAsyncBackend
  std::string note;   // what was done or left, for the session's log (empty: nothing to say)
};
// Sets both variables through `set` when the configuration plans (auto, record, replay), KARMA_TORCH_ALLOCATOR is
// async and the application set neither (`get` reads the environment); otherwise leaves them.
TorchAllocatorChoice ChooseTorchAllocator(const SessionConfig& config, const EnvConfig::Getter& get,
                                          const std::function<void(const char*, const char*)>& set);
// The choice libkarma.so made at load (ApplyTorchAllocatorAtLoad), for the session's log.
const TorchAllocatorChoice& TorchAllocatorAtLoad();
// Called once from libkarma.so's constructor, while the process is single-threaded: reads the KARMA_* variables
// and sets PyTorch's through setenv.
void ApplyTorchAllocatorAtLoad();

}  // namespace karma::rt
