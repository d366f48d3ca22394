// Tests of byte and capacity parsing and printing.
#include "ground/common/units.h"

#include <gtest/gtest.h>

namespace karma {
namespace {

TEST(ParseBytes, AcceptsPlainAndUnits) {
  EXPECT_EQ(*ParseBytes("1048576"), 1048576u);
  EXPECT_EQ(*ParseBytes("512MiB"), 512 * kMiB);
  EXPECT_EQ(*ParseBytes("16GiB"), 16 * kGiB);
  EXPECT_EQ(*ParseBytes("16 gib"), 16 * kGiB);
  EXPECT_EQ(*ParseBytes("1.5GB"), 1500000000u);
  EXPECT_EQ(*ParseBytes("64M"), 64 * kMiB);
  EXPECT_EQ(*ParseBytes("2KiB"), 2048u);
  EXPECT_EQ(*ParseBytes("3kb"), 3000u);
  EXPECT_EQ(*ParseBytes(" 7B "), 7u);
  EXPECT_EQ(*ParseBytes("0.5GiB"), 512 * kMiB);
}

TEST(ParseBytes, RejectsGarbageWithTheAcceptedForms) {
  for (const char* bad : {"", "GiB", "12XB", "-5", "1..2G", "1e9", "abc", "5 Gibi", "99999999999999999999"}) {
    auto r = ParseBytes(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  EXPECT_NE(ParseBytes("12XB").status().message().find("512MiB"), std::string::npos);
  EXPECT_FALSE(ParseBytes("20000000TiB").ok());  // overflows 64 bits
}

TEST(ParseCapacity, FractionsNeedADecimalPoint) {
  auto f = ParseCapacity("0.8");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->is_fraction);
  EXPECT_DOUBLE_EQ(f->fraction, 0.8);
  EXPECT_EQ(f->Resolve(10 * kGiB, 10 * kGiB), 8 * kGiB);
  // Of the memory free at the start: another process holding 8 GiB of 10 leaves 0.8 of 2.
  EXPECT_EQ(f->Resolve(10 * kGiB, 2 * kGiB), static_cast<uint64_t>(0.8 * 2 * kGiB));
  EXPECT_EQ(f->Resolve(10 * kGiB, 12 * kGiB), 8 * kGiB);  // never beyond the device
  auto whole = ParseCapacity("1.0");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->Resolve(16 * kGiB, 16 * kGiB), 16 * kGiB);
  auto bytes = ParseCapacity("512MiB");
  ASSERT_TRUE(bytes.ok());
  EXPECT_FALSE(bytes->is_fraction);
  EXPECT_EQ(bytes->Resolve(16 * kGiB, 256 * kMiB), 512 * kMiB);  // bytes as given, even beyond what is free
  EXPECT_EQ(ParseCapacity("4096")->bytes, 4096u);
}

TEST(ParseCapacity, RejectsOutOfRange) {
  for (const char* bad : {"1.5", "0.0", "0", "0B", "-0.5", "fast", "1.0GiBs"}) {
    auto r = ParseCapacity(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_NE(ParseCapacity("1.5").status().message().find("(0, 1]"), std::string::npos);
}

TEST(FormatBytes, PicksTheLargestUnit) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(512 * kMiB), "512.00 MiB");
  EXPECT_EQ(FormatBytes(11405426688ull), "10.62 GiB");
}

TEST(FormatSignedBytes, AlwaysHasASign) {
  EXPECT_EQ(FormatSignedBytes(0), "+0 B");
  EXPECT_EQ(FormatSignedBytes(-512), "-512 B");
  EXPECT_EQ(FormatSignedBytes(static_cast<int64_t>(3 * kMiB / 2)), "+1.50 MiB");
  EXPECT_EQ(FormatSignedBytes(INT64_MIN), "-8388608.00 TiB");  // no overflow negating the least value
}

}  // namespace
}  // namespace karma
