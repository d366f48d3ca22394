// Mapping the KARMA_* variables to the session's configuration.
#include "runtime/base/config.h"

#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

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
  c.batch_moves = env.flag(EnvVar::KARMA_BATCH_MOVES);
  c.move_threads = env.flag(EnvVar::KARMA_MOVE_THREADS);
  c.per_tensor = env.text(EnvVar::KARMA_ALLOCATORS) != "keep";
  const std::string& residency = env.text(EnvVar::KARMA_RESIDENCY);
  c.residency = residency == "copy"   ? ResidencyChoice::kCopy
                : residency == "auto" ? ResidencyChoice::kAuto
                                      : ResidencyChoice::kManaged;
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
AllocatorChoice& ChoiceAtLoad() {
  static AllocatorChoice choice;
  return choice;
}

}  // namespace

const std::vector<AllocatorSwitch>& AllocatorSwitches() {
  static const std::vector<AllocatorSwitch> table = {
      {"PyTorch", {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}, "backend:cudaMallocAsync"},
      {"TensorFlow", {"TF_GPU_ALLOCATOR"}, "cuda_malloc_async"},
      {"JAX", {"XLA_PYTHON_CLIENT_ALLOCATOR"}, "platform"},
      {"JAX", {"XLA_PYTHON_CLIENT_PREALLOCATE"}, "false"},
  };
  return table;
}

AllocatorChoice ChooseAllocators(const SessionConfig& config, const EnvConfig::Getter& get,
                                 const std::function<void(const char*, const char*)>& set) {
  AllocatorChoice choice;
  if (config.mode == Mode::kUm || config.mode == Mode::kOff) return choice;  // the baseline runs as it is
  if (!config.per_tensor) {
    choice.note = "KARMA_ALLOCATORS=keep: frameworks keep their allocators; each segment they allocate is one buffer";
    return choice;
  }
  std::vector<std::string> kept;
  for (const AllocatorSwitch& s : AllocatorSwitches()) {
    const char* own = nullptr;
    for (const char* name : s.names) {
      if (const char* v = get(name); v != nullptr) {
        if (std::string(v).find(s.value) == std::string::npos) kept.push_back(std::string(name) + "=" + v);
        own = v;
        break;
      }
    }
    if (own != nullptr) continue;
    for (const char* name : s.names) {
      set(name, s.value);
      choice.set.push_back(std::string(name) + "=" + s.value);
    }
  }
  if (!choice.set.empty()) {
    choice.note = "per-tensor allocations: set " + fmt::format("{}", fmt::join(choice.set, " ")) +
                  " (KARMA_ALLOCATORS=keep leaves them)";
  }
  if (!kept.empty()) {
    choice.note += std::string(choice.note.empty() ? "" : "; ") + "the application's " +
                   fmt::format("{}", fmt::join(kept, " ")) + " stays: each segment it allocates is one buffer";
  }
  return choice;
}

const AllocatorChoice& AllocatorsAtLoad() { return ChoiceAtLoad(); }

void ApplyAllocatorsAtLoad() {
  try {
    const SessionConfig config = ConfigFromEnv(EnvConfig::FromProcessEnvironment());
    ChoiceAtLoad() = ChooseAllocators(
        config, [](const char* n) { return static_cast<const char*>(std::getenv(n)); },
        [](const char* n, const char* v) { ::setenv(n, v, 0); });
  } catch (...) {
    // Nothing is set: the application runs with its own allocator settings.
  }
}

}  // namespace karma::rt
