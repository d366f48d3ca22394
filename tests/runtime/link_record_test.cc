// The link record a run leaves for later runs on the same device (runtime/plan/link_record.h).
#include "runtime/plan/link_record.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace karma::rt {
namespace {

class LinkRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/karma-link-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)!system(("rm -rf " + dir_).c_str()); }
  void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
  std::string dir_;
};

TEST_F(LinkRecordTest, PathNamesTheDevice) {
  EXPECT_EQ(LinkRecordPath("traces", "Tesla V100-PCIE-16GB (simcuda)"),
            "traces/link-Tesla_V100-PCIE-16GB__simcuda_.json");
  EXPECT_EQ(LinkRecordPath("", "NVIDIA H100 80GB HBM3"), "./link-NVIDIA_H100_80GB_HBM3.json");
  EXPECT_EQ(LinkRecordPath("d", "../x/y"), "d/link-.._x_y.json");  // no way out of the directory
  EXPECT_EQ(LinkRecordPath("d", ""), "d/link-unknown.json");
}

TEST_F(LinkRecordTest, RoundTrip) {
  LinkRecord r;
  r.device = "NVIDIA H200";
  r.h2d_bw = 20e9;
  r.d2h_bw = 7.5e9;
  r.went_back = {"a6faaa7dac89e80e", "3001cf4d874c447c"};
  const std::string path = LinkRecordPath(dir_, r.device);
  ASSERT_TRUE(WriteLinkRecord(path, r).ok());
  auto read = ReadLinkRecord(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->device, r.device);
  EXPECT_DOUBLE_EQ(read->h2d_bw, 20e9);
  EXPECT_DOUBLE_EQ(read->d2h_bw, 7.5e9);
  EXPECT_EQ(read->went_back, r.went_back);
}

TEST_F(LinkRecordTest, MissingIsNotFoundAndBadFilesAreNamed) {
  auto missing = ReadLinkRecord(dir_ + "/link-none.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  const std::string bad[] = {
      "not json",
      "[1, 2]",
      R"({"format": 2, "device": "x", "h2d_gb_per_s": 6, "d2h_gb_per_s": 4})",
      R"({"format": 1, "h2d_gb_per_s": 6, "d2h_gb_per_s": 4})",
      R"({"format": 1, "device": "x", "h2d_gb_per_s": "fast", "d2h_gb_per_s": 4})",
      R"({"format": 1, "device": "x", "h2d_gb_per_s": 0, "d2h_gb_per_s": 0})",
      R"({"format": 1, "device": "x", "h2d_gb_per_s": -6, "d2h_gb_per_s": 4})",
      R"({"format": 1, "device": "x", "h2d_gb_per_s": 6, "d2h_gb_per_s": 4, "went_back": [1]})",
  };
  const std::string path = dir_ + "/link-x.json";
  for (const std::string& text : bad) {
    Write(path, text);
    auto r = ReadLinkRecord(path);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << text;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  }
  // One direction measured is a record; went_back may be absent.
  Write(path, R"({"format": 1, "device": "x", "h2d_gb_per_s": 6, "d2h_gb_per_s": 0})");
  auto one = ReadLinkRecord(path);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_DOUBLE_EQ(one->h2d_bw, 6e9);
  EXPECT_DOUBLE_EQ(one->d2h_bw, 0);
  EXPECT_TRUE(one->went_back.empty());
}

TEST_F(LinkRecordTest, WriteFailsInAMissingDirectory) {
  LinkRecord r;
  r.device = "x";
  r.h2d_bw = 6e9;
  EXPECT_FALSE(WriteLinkRecord(dir_ + "/no/such/dir/link-x.json", r).ok());
}

TEST_F(LinkRecordTest, WentBackKeepsEachKeyOnceMostRecentLast) {
  LinkRecord r;
  MarkWentBack(&r, "a", true);
  MarkWentBack(&r, "b", true);
  MarkWentBack(&r, "a", true);
  EXPECT_EQ(r.went_back, (std::vector<std::string>{"b", "a"}));
  MarkWentBack(&r, "b", false);  // a later trial kept it
  EXPECT_EQ(r.went_back, (std::vector<std::string>{"a"}));
  for (size_t i = 0; i < LinkRecord::kMaxWentBack + 5; ++i) MarkWentBack(&r, "k" + std::to_string(i), true);
  ASSERT_EQ(r.went_back.size(), LinkRecord::kMaxWentBack);
  EXPECT_EQ(r.went_back.front(), "k5");
  EXPECT_EQ(r.went_back.back(), "k" + std::to_string(LinkRecord::kMaxWentBack + 4));
}

}  // namespace
}  // namespace karma::rt
