// Tests of the KARMA_* table: every entry is well formed, values are validated, defaults are safe.
#include "ground/common/env.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace karma {
namespace {

EnvConfig FromMap(const std::map<std::string, std::string>& env) {
  std::vector<std::string> names;
  for (const auto& [k, v] : env) names.push_back(k);
  return EnvConfig(
      [&env](const char* n) -> const char* {
        auto it = env.find(n);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      names);
}

TEST(EnvTable, EveryEntryIsWellFormedAndItsDefaultValid) {
  std::set<std::string> names;
  for (const EnvVarInfo& v : AllEnvVars()) {
    EXPECT_TRUE(names.insert(v.name).second) << "duplicate " << v.name;
    EXPECT_EQ(std::string(v.name).rfind("KARMA_", 0), 0u) << v.name;
    EXPECT_GT(std::string(v.help).size(), 10u) << v.name;
    EXPECT_TRUE(ValidateEnvValue(v, v.default_value).ok()) << v.name << " default " << v.default_value;
    EXPECT_EQ(v.type == EnvType::kEnum, std::string(v.choices).size() > 0) << v.name;
  }
  for (const char* required : {"KARMA_CAPACITY", "KARMA_MODE", "KARMA_TRACE_DIR", "KARMA_LOG"}) {
    EXPECT_TRUE(names.count(required)) << required;
  }
}

TEST(EnvConfig, DefaultsWhenUnset) {
  EnvConfig c = FromMap({});
  EXPECT_TRUE(c.problems().empty());
  EXPECT_FALSE(c.is_set(EnvVar::KARMA_CAPACITY));
  EXPECT_TRUE(c.capacity(EnvVar::KARMA_CAPACITY).is_fraction);
  EXPECT_EQ(c.text(EnvVar::KARMA_MODE), "auto");
}

TEST(EnvConfig, ValidValuesAreTaken) {
  EnvConfig c = FromMap({{"KARMA_CAPACITY", "512MiB"}, {"KARMA_MODE", "um"}, {"KARMA_LOG", "debug"}});
  EXPECT_TRUE(c.problems().empty());
  EXPECT_EQ(c.capacity(EnvVar::KARMA_CAPACITY).bytes, 512 * kMiB);
  EXPECT_EQ(c.text(EnvVar::KARMA_MODE), "um");
  EXPECT_TRUE(c.is_set(EnvVar::KARMA_LOG));
}

TEST(EnvConfig, BadValuesFallBackToTheDefaultWithAMessageNamingTheVariableAndForms) {
  EnvConfig c = FromMap({{"KARMA_CAPACITY", "12XB"}, {"KARMA_MODE", "fast"}});
  ASSERT_EQ(c.problems().size(), 2u);
  EXPECT_NE(c.problems()[0].find("KARMA_CAPACITY='12XB'"), std::string::npos);
  EXPECT_NE(c.problems()[0].find("16GiB"), std::string::npos);
  EXPECT_NE(c.problems()[1].find("auto|record|replay|um|off"), std::string::npos);
  EXPECT_TRUE(c.capacity(EnvVar::KARMA_CAPACITY).is_fraction);
  EXPECT_EQ(c.text(EnvVar::KARMA_MODE), "auto");
  EXPECT_FALSE(c.is_set(EnvVar::KARMA_MODE));
}

TEST(EnvConfig, UnknownKarmaNamesAreReported) {
  EnvConfig c = FromMap({{"KARMA_CAPACTY", "1GiB"}, {"PATH", "/bin"}});
  ASSERT_EQ(c.problems().size(), 1u);
  EXPECT_NE(c.problems()[0].find("KARMA_CAPACTY"), std::string::npos);
}

}  // namespace
}  // namespace karma
