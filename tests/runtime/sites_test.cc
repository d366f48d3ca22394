// Allocation sites: libunwind capture and lazy symbolization.
#include "runtime/observe/sites.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace karma::rt {
namespace {

TEST(SitesTest, LibunwindLoadsPrivately) {
  ASSERT_NE(LoadBacktrace(), nullptr);
  SiteTable t;
  const uint32_t a = t.Capture();
  EXPECT_NE(a, 0u);
  // libunwind's _Unwind_* must not have replaced the C++ runtime's: exceptions still work.
  bool caught = false;
  try {
    throw std::runtime_error("x");
  } catch (const std::runtime_error&) {
    caught = true;
  }
  EXPECT_TRUE(caught);
}

TEST(SitesTest, IdenticalStacksShareAnId) {
  SiteTable t;
  const void* frames[] = {reinterpret_cast<const void*>(&std::printf), reinterpret_cast<const void*>(&std::abort)};
  const uint32_t a = t.Intern(frames, 2);
  const uint32_t b = t.Intern(frames, 2);
  const uint32_t c = t.Intern(frames, 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(t.size(), 2u);
}

TEST(SitesTest, DescribeNamesFramesInnermostFirst) {
  SiteTable t;
  // Return addresses point past a call; Describe looks one byte back, so give it addresses inside functions.
  const void* frames[] = {reinterpret_cast<const char*>(&std::printf) + 1,
                          reinterpret_cast<const char*>(&std::abort) + 1};
  const std::string s = t.Describe(t.Intern(frames, 2));
  EXPECT_NE(s.find("printf"), std::string::npos) << s;
  EXPECT_NE(s.find("abort"), std::string::npos) << s;
  EXPECT_LT(s.find("printf"), s.find("abort")) << s;
  EXPECT_NE(s.find("libc.so"), std::string::npos) << s;
  EXPECT_EQ(t.Describe(0), "");
  EXPECT_EQ(t.Describe(99), "");
}

}  // namespace
}  // namespace karma::rt
