// The session's configuration from the KARMA_* variables, and what happens to bad or inconsistent values.
#include "runtime/base/config.h"

#include <gtest/gtest.h>

#include <map>

namespace karma::rt {
namespace {

SessionConfig From(const std::map<std::string, std::string>& vars) {
  std::vector<std::string> names;
  for (const auto& [k, v] : vars) names.push_back(k);
  EnvConfig env(
      [&](const char* n) -> const char* {
        auto it = vars.find(n);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      names);
  return ConfigFromEnv(env);
}

TEST(ConfigTest, Defaults) {
  const SessionConfig c = From({});
  EXPECT_EQ(c.mode, Mode::kAuto);
  EXPECT_TRUE(c.capacity.is_fraction);
  EXPECT_EQ(c.trace_dir, "karma-traces");
  EXPECT_TRUE(c.iteration_marker.empty());
  EXPECT_EQ(c.warmup_iterations, 1u);
  EXPECT_EQ(c.arena_segment_bytes, 256ull << 20);
  EXPECT_TRUE(c.live_view);
  EXPECT_TRUE(c.batch_moves);
  EXPECT_TRUE(c.move_threads);
  EXPECT_TRUE(c.ilp);
  EXPECT_TRUE(c.per_tensor);
  EXPECT_TRUE(c.problems.empty());
}

TEST(ConfigTest, ValuesAreTaken) {
  const SessionConfig c = From({{"KARMA_MODE", "record"}, {"KARMA_CAPACITY", "3GiB"}, {"KARMA_TRACE_DIR", "/tmp/t"},
                                {"KARMA_ITERATION_MARKER", "step"}, {"KARMA_WARMUP_ITERATIONS", "3"},
                                {"KARMA_ARENA_SEGMENT", "64MiB"}, {"KARMA_LIVE", "0"}, {"KARMA_LOG", "debug"},
                                {"KARMA_SOLVER", "heuristic"},
                                {"KARMA_BATCH_MOVES", "0"}, {"KARMA_MOVE_THREADS", "0"}});
  EXPECT_EQ(c.mode, Mode::kRecord);
  EXPECT_EQ(c.capacity.bytes, 3ull << 30);
  EXPECT_EQ(c.trace_dir, "/tmp/t");
  EXPECT_EQ(c.iteration_marker, "step");
  EXPECT_EQ(c.warmup_iterations, 3u);
  EXPECT_FALSE(c.batch_moves);
  EXPECT_FALSE(c.move_threads);
  EXPECT_EQ(c.arena_segment_bytes, 64ull << 20);
  EXPECT_FALSE(c.live_view);
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_FALSE(c.ilp);
  EXPECT_TRUE(c.problems.empty());
}

TEST(ConfigTest, BadValuesFallBackWithAMessageNamingTheVariable) {
  const SessionConfig c = From({{"KARMA_MODE", "fast"}, {"KARMA_WARMUP_ITERATIONS", "-2"},
                                {"KARMA_ARENA_SEGMENT", "1KiB"}, {"KARMA_CAPACITY", "lots"}, {"KARMA_TYPO", "1"},
                                {"KARMA_SOLVER", "cplex"}});
  EXPECT_EQ(c.mode, Mode::kAuto);
  EXPECT_EQ(c.warmup_iterations, 1u);
  EXPECT_EQ(c.arena_segment_bytes, 2ull << 20);
  EXPECT_TRUE(c.ilp);
  ASSERT_EQ(c.problems.size(), 6u);
  std::string all;
  for (const auto& p : c.problems) all += p + "\n";
  for (const char* name :
       {"KARMA_MODE", "KARMA_WARMUP_ITERATIONS", "KARMA_ARENA_SEGMENT", "KARMA_CAPACITY", "KARMA_TYPO", "KARMA_SOLVER"}) {
    EXPECT_NE(all.find(name), std::string::npos) << name;
  }
}

TEST(ConfigTest, ReplayWithoutAReadablePlanRunsAsUm) {
  SessionConfig c = From({{"KARMA_MODE", "replay"}});
  EXPECT_EQ(c.mode, Mode::kUm);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("KARMA_PLAN"), std::string::npos);
  c = From({{"KARMA_MODE", "replay"}, {"KARMA_PLAN", "/nonexistent/plan"}});
  EXPECT_EQ(c.mode, Mode::kUm);
  EXPECT_NE(c.problems[0].find("/nonexistent/plan"), std::string::npos);
  c = From({{"KARMA_MODE", "replay"}, {"KARMA_PLAN", "/proc/self/status"}});
  EXPECT_EQ(c.mode, Mode::kReplay);
}

// ChooseAllocators over a map standing in for the process environment.
struct FrameworkEnv {
  std::map<std::string, std::string> vars;
  AllocatorChoice Choose(const SessionConfig& c) {
    return ChooseAllocators(
        c,
        [&](const char* n) -> const char* {
          auto it = vars.find(n);
          return it == vars.end() ? nullptr : it->second.c_str();
        },
        [&](const char* n, const char* v) { vars[n] = v; });
  }
};

const std::map<std::string, std::string> kPerTensor = {
    {"PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync"}, {"PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"},
    {"TF_GPU_ALLOCATOR", "cuda_malloc_async"},         {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"},
    {"XLA_PYTHON_CLIENT_PREALLOCATE", "false"}};

TEST(ConfigTest, FrameworksAllocatePerTensorWhenKarmaPlansAndTheApplicationChoseNothing) {
  for (const char* mode : {"auto", "record"}) {
    FrameworkEnv e;
    const AllocatorChoice choice = e.Choose(From({{"KARMA_MODE", mode}}));
    EXPECT_EQ(e.vars, kPerTensor) << mode;
    EXPECT_EQ(choice.set.size(), kPerTensor.size());
    EXPECT_NE(choice.note.find("KARMA_ALLOCATORS=keep"), std::string::npos) << choice.note;
    EXPECT_NE(choice.note.find("TF_GPU_ALLOCATOR=cuda_malloc_async"), std::string::npos) << choice.note;
  }
  FrameworkEnv e;
  e.Choose(From({{"KARMA_MODE", "replay"}, {"KARMA_PLAN", "/proc/self/status"}}));
  EXPECT_EQ(e.vars, kPerTensor);
}

TEST(ConfigTest, TheApplicationsAllocatorSettingsStay) {
  // Either of PyTorch's names set, to anything: neither is touched, the other frameworks' are set; a setting
  // without the per-tensor value is named in the log.
  for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    FrameworkEnv e;
    e.vars[name] = "expandable_segments:True";
    const AllocatorChoice choice = e.Choose(From({}));
    EXPECT_EQ(choice.set.size(), 3u) << name;
    EXPECT_EQ(e.vars[name], "expandable_segments:True");
    EXPECT_EQ(e.vars.count(std::string(name) == "PYTORCH_ALLOC_CONF" ? "PYTORCH_CUDA_ALLOC_CONF" : "PYTORCH_ALLOC_CONF"),
              0u);
    EXPECT_EQ(e.vars["TF_GPU_ALLOCATOR"], "cuda_malloc_async");
    EXPECT_NE(choice.note.find(std::string(name) + "=expandable_segments:True stays"), std::string::npos)
        << choice.note;
  }
  FrameworkEnv e;
  e.vars["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync";
  e.vars["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true";  // JAX's two switches are independent
  const AllocatorChoice choice = e.Choose(From({}));
  EXPECT_EQ(e.vars.size(), 4u);
  EXPECT_EQ(e.vars["XLA_PYTHON_CLIENT_PREALLOCATE"], "true");
  EXPECT_EQ(e.vars["XLA_PYTHON_CLIENT_ALLOCATOR"], "platform");
  EXPECT_EQ(choice.note.find("PYTORCH"), std::string::npos) << choice.note;  // already per tensor: nothing to say
  EXPECT_NE(choice.note.find("XLA_PYTHON_CLIENT_PREALLOCATE=true stays"), std::string::npos) << choice.note;
}

TEST(ConfigTest, KeepAndTheModesThatDoNotPlanLeaveTheFrameworksDefaults) {
  FrameworkEnv e;
  AllocatorChoice choice = e.Choose(From({{"KARMA_ALLOCATORS", "keep"}}));
  EXPECT_TRUE(choice.set.empty());
  EXPECT_TRUE(e.vars.empty());
  EXPECT_NE(choice.note.find("frameworks keep their allocators"), std::string::npos) << choice.note;
  // um is the baseline (managed memory under the framework as it is); replay without a plan runs as um.
  for (const auto& vars : std::vector<std::map<std::string, std::string>>{
           {{"KARMA_MODE", "um"}}, {{"KARMA_MODE", "off"}}, {{"KARMA_MODE", "replay"}}}) {
    choice = e.Choose(From(vars));
    EXPECT_TRUE(choice.set.empty());
    EXPECT_TRUE(e.vars.empty());
    EXPECT_TRUE(choice.note.empty());
  }
  // A bad value falls back to the default, per-tensor.
  EXPECT_TRUE(From({{"KARMA_ALLOCATORS", "native"}}).per_tensor);
  EXPECT_EQ(From({{"KARMA_ALLOCATORS", "native"}}).problems.size(), 1u);
}

}  // namespace
}  // namespace karma::rt
