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
  g_env = {{"SIMCUDA_GPU", "h100-80g"}, {"SIMCUDA_MEM", "256MiB"}, {"SIMCUDA_STATS", "/tmp/s.json"},
           {"SIMCUDA_LOG", "info"}, {"SIMCUDA_CONTEXT_MEM", "8MiB"}};
  std::vector<std::string> problems;
  const Config c = ConfigFromEnvironment(&Get, &problems);
  EXPECT_STREQ(c.profile.name, "h100-80g");
  EXPECT_EQ(c.context_bytes, 8ull << 20);
  EXPECT_DOUBLE_EQ(c.profile.copy.h2d_bw, 50e9);     // the copy engines
  EXPECT_DOUBLE_EQ(c.profile.managed.d2h_bw, 7e9);   // managed memory's evictions, as measured
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

// SIMCUDA_LINK replaces the profile's host-link rates (GB/s, one figure or H2D/D2H), of the copy engines and of
// managed memory alike, and keeps its name.
TEST(Config, LinkRatesFromTheEnvironment) {
  g_env = {{"SIMCUDA_LINK", "6/3.5"}};
  std::vector<std::string> problems;
  Config c = ConfigFromEnvironment(&Get, &problems);
  EXPECT_TRUE(problems.empty());
  EXPECT_TRUE(c.link_overridden);
  EXPECT_STREQ(c.profile.name, "v100-16g-pcie3");
  EXPECT_DOUBLE_EQ(c.profile.copy.h2d_bw, 6e9);
  EXPECT_DOUBLE_EQ(c.profile.copy.d2h_bw, 3.5e9);
  EXPECT_DOUBLE_EQ(c.profile.managed.h2d_bw, 6e9);
  EXPECT_DOUBLE_EQ(c.profile.managed.d2h_bw, 3.5e9);
  g_env = {{"SIMCUDA_LINK", "4"}};
  c = ConfigFromEnvironment(&Get, &problems);
  EXPECT_DOUBLE_EQ(c.profile.copy.h2d_bw, 4e9);
  EXPECT_DOUBLE_EQ(c.profile.managed.d2h_bw, 4e9);
  const double nominal = karma::policy::DefaultProfile().copy.h2d_bw;
  for (const char* bad : {"fast", "6/", "0", "-2/3", "6/3/1", "6GB/s"}) {
    g_env = {{"SIMCUDA_LINK", bad}};
    problems.clear();
    c = ConfigFromEnvironment(&Get, &problems);
    EXPECT_FALSE(c.link_overridden) << bad;
    EXPECT_DOUBLE_EQ(c.profile.copy.h2d_bw, nominal) << bad;
    ASSERT_EQ(problems.size(), 1u) << bad;
    EXPECT_NE(problems[0].find("SIMCUDA_LINK"), std::string::npos);
  }
}

}  // namespace
}  // namespace simcuda
