// SIMCUDA_* parsing: profiles, memory sizes, bad values.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "device/config.h"

namespace simcuda {
namespace {

std::map<std::string, std::string> g_env;
const char* Get(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

TEST(Config, DefaultsToThePapersPlatform) {
  g_env.clear();
  std::vector<std::string> problems;
  const Config c = ConfigFromEnvironment(&Get, &problems);
  EXPECT_STREQ(c.profile.name, "v100-16g-pcie3");
  EXPECT_EQ(c.capacity_bytes, 16ull << 30);
  EXPECT_TRUE(c.stats_path.empty());
  EXPECT_TRUE(problems.empty());
}

TEST(Config, ProfileAndMemoryFromTheEnvironment) {
  g_env = {{"SIMCUDA_GPU", "h100-80g-pcie5"}, {"SIMCUDA_MEM", "256MiB"}, {"SIMCUDA_STATS", "/tmp/s.json"},
           {"SIMCUDA_LOG", "info"}, {"SIMCUDA_CONTEXT_MEM", "8MiB"}};
  std::vector<std::string> problems;
  const Config c = ConfigFromEnvironment(&Get, &problems);
  EXPECT_STREQ(c.profile.name, "h100-80g-pcie5");
  EXPECT_EQ(c.context_bytes, 8ull << 20);
  EXPECT_DOUBLE_EQ(c.profile.h2d_bw, 50e9);
  EXPECT_EQ(c.capacity_bytes, 256ull << 20);
  EXPECT_EQ(c.stats_path, "/tmp/s.json");
  EXPECT_EQ(c.log, LogLevel::kInfo);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(IdentityOf(c.profile).cc_major, 9);
}

TEST(Config, BadValuesAreReportedAndDefaulted) {
  g_env = {{"SIMCUDA_GPU", "k80"}, {"SIMCUDA_MEM", "lots"}, {"SIMCUDA_LOG", "loud"}};
  std::vector<std::string> problems;
  const Config c = ConfigFromEnvironment(&Get, &problems);
  EXPECT_STREQ(c.profile.name, "v100-16g-pcie3");
  EXPECT_EQ(c.capacity_bytes, 16ull << 30);
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_NE(problems[0].find("a100-40g-pcie4"), std::string::npos);  // names the known profiles
  EXPECT_NE(problems[1].find("SIMCUDA_MEM"), std::string::npos);
  g_env = {{"SIMCUDA_MEM", "0"}};
  problems.clear();
  EXPECT_EQ(ConfigFromEnvironment(&Get, &problems).capacity_bytes, 16ull << 30);
  EXPECT_EQ(problems.size(), 1u);
  g_env = {{"SIMCUDA_MEM", "64MiB"}, {"SIMCUDA_CONTEXT_MEM", "64MiB"}};  // must leave room
  problems.clear();
  EXPECT_EQ(ConfigFromEnvironment(&Get, &problems).context_bytes, 0u);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("SIMCUDA_CONTEXT_MEM"), std::string::npos);
}

}  // namespace
}  // namespace simcuda
