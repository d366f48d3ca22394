// Mapping the KARMA_* variables to the session's configuration.
#include "runtime/session/config.h"

#include <unistd.h>

#include <cstdlib>

namespace karma::rt {

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kAuto: return "auto";
    case Mode::kRecord: return "record";
    case Mode::kReplay: return "replay";
    case Mode::kUm: return "um";
    case Mode::kOff: return "off";
  }
  return "?";
}

SessionConfig ConfigFromEnv(const EnvConfig& env) {
  SessionConfig c;
  c.problems = env.problems();
  const std::string& mode = env.text(EnvVar::KARMA_MODE);
  if (mode == "record") c.mode = Mode::kRecord;
  else if (mode == "replay") c.mode = Mode::kReplay;
  else if (mode == "um") c.mode = Mode::kUm;
  else if (mode == "off") c.mode = Mode::kOff;
  else c.mode = Mode::kAuto;
  c.capacity = env.capacity(EnvVar::KARMA_CAPACITY);
  c.trace_dir = env.text(EnvVar::KARMA_TRACE_DIR);
  c.plan_path = env.text(EnvVar::KARMA_PLAN);
  c.ilp = env.text(EnvVar::KARMA_SOLVER) != "heuristic";
  c.iteration_marker = env.text(EnvVar::KARMA_ITERATION_MARKER);
  const int64_t warmup = env.integer(EnvVar::KARMA_WARMUP_ITERATIONS);
  if (warmup < 0 || warmup > 1000000) {
    c.problems.push_back("KARMA_WARMUP_ITERATIONS=" + std::to_string(warmup) +
                         " is out of range (0..1000000); using 1");
    c.warmup_iterations = 1;
  } else {
    c.warmup_iterations = static_cast<uint32_t>(warmup);
  }
  c.arena_segment_bytes = env.bytes(EnvVar::KARMA_ARENA_SEGMENT);
  if (c.arena_segment_bytes < (2ull << 20)) {
    c.problems.push_back("KARMA_ARENA_SEGMENT=" + env.text(EnvVar::KARMA_ARENA_SEGMENT) +
                         " is below one 2 MiB page; using 2MiB");
    c.arena_segment_bytes = 2ull << 20;
  }
  c.live_view = env.flag(EnvVar::KARMA_LIVE);
  c.rerun_kernels = env.flag(EnvVar::KARMA_RERUN_KERNELS);
  c.batch_moves = env.flag(EnvVar::KARMA_BATCH_MOVES);
  c.move_threads = env.flag(EnvVar::KARMA_MOVE_THREADS);
  c.torch_async = env.text(EnvVar::KARMA_TORCH_ALLOCATOR) != "keep";
  LogLevel level = LogLevel::kWarn;
  ParseLogLevel(env.text(EnvVar::KARMA_LOG), &level);
  c.log_level = level;
  if (c.mode == Mode::kReplay) {
    if (c.plan_path.empty()) {
      c.problems.push_back("KARMA_MODE=replay needs KARMA_PLAN=FILE; running as KARMA_MODE=um");
      c.mode = Mode::kUm;
    } else if (::access(c.plan_path.c_str(), R_OK) != 0) {
      c.problems.push_back("KARMA_PLAN=" + c.plan_path + " cannot be read; running as KARMA_MODE=um");
      c.mode = Mode::kUm;
    }
  }
  return c;
}

namespace {

// A function's static, not a global: libkarma.so's constructor may run before this file's globals are built.
TorchAllocatorChoice& ChoiceAtLoad() {
  static TorchAllocatorChoice choice;
  return choice;
}

}  // namespace

TorchAllocatorChoice ChooseTorchAllocator(const SessionConfig& config, const EnvConfig::Getter& get,
                                          const std::function<void(const char*, const char*)>& set) {
  TorchAllocatorChoice choice;
  if (config.mode == Mode::kUm || config.mode == Mode::kOff) return choice;  // the baseline runs as PyTorch's
  constexpr const char* kNames[] = {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"};
  for (const char* name : kNames) {
    const char* value = get(name);
    if (value == nullptr) continue;
    if (std::string(value).find(kTorchAsyncBackend) == std::string::npos) {
      choice.note = std::string("PyTorch's allocator setting ") + name + "=" + value + " stays: without " +
                    kTorchAsyncBackend + " its memory holds dead tensors that KARMA evicts to the host";
    }
    return choice;
  }
  if (!config.torch_async) {
    choice.note = "KARMA_TORCH_ALLOCATOR=keep: PyTorch's caching allocator stays; KARMA evicts its dead tensors "
                  "to the host";
    return choice;
  }
  for (const char* name : kNames) set(name, kTorchAsyncBackend);
  choice.set = true;
  choice.note = std::string("PyTorch allocates each tensor with cudaMallocAsync (PYTORCH_ALLOC_CONF and "
                            "PYTORCH_CUDA_ALLOC_CONF set to ") + kTorchAsyncBackend + "; KARMA_TORCH_ALLOCATOR=keep " +
                "leaves them)";
  return choice;
}

const TorchAllocatorChoice& TorchAllocatorAtLoad() { return ChoiceAtLoad(); }

void ApplyTorchAllocatorAtLoad() {
  try {
    const SessionConfig config = ConfigFromEnv(EnvConfig::FromProcessEnvironment());
    ChoiceAtLoad() = ChooseTorchAllocator(
        config, [](const char* n) { return static_cast<const char*>(std::getenv(n)); },
        [](const char* n, const char* v) { ::setenv(n, v, 0); });
  } catch (...) {
    // Nothing is set: the application runs with its own allocator setting.
  }
}

}  // namespace karma::rt
