// The session's configuration from the KARMA_* variables, and what happens to bad or inconsistent values.
#include "runtime/session/config.h"

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
  EXPECT_TRUE(c.rerun_kernels);
  EXPECT_TRUE(c.batch_moves);
  EXPECT_FALSE(c.move_threads);
  EXPECT_TRUE(c.ilp);
  EXPECT_TRUE(c.problems.empty());
}

TEST(ConfigTest, ValuesAreTaken) {
  const SessionConfig c = From({{"KARMA_MODE", "record"}, {"KARMA_CAPACITY", "3GiB"}, {"KARMA_TRACE_DIR", "/tmp/t"},
                                {"KARMA_ITERATION_MARKER", "step"}, {"KARMA_WARMUP_ITERATIONS", "3"},
                                {"KARMA_ARENA_SEGMENT", "64MiB"}, {"KARMA_LIVE", "0"}, {"KARMA_LOG", "debug"},
                                {"KARMA_SOLVER", "heuristic"}, {"KARMA_RERUN_KERNELS", "0"},
                                {"KARMA_BATCH_MOVES", "0"}, {"KARMA_MOVE_THREADS", "1"}});
  EXPECT_EQ(c.mode, Mode::kRecord);
  EXPECT_EQ(c.capacity.bytes, 3ull << 30);
  EXPECT_EQ(c.trace_dir, "/tmp/t");
  EXPECT_EQ(c.iteration_marker, "step");
  EXPECT_EQ(c.warmup_iterations, 3u);
  EXPECT_FALSE(c.rerun_kernels);
  EXPECT_FALSE(c.batch_moves);
  EXPECT_TRUE(c.move_threads);
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

}  // namespace
}  // namespace karma::rt
