// Tests of the .ktrace writer and reader: round trips, and refusal of cut, flipped, foreign and newer files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "ground/trace/ktrace_format.h"
#include "ground/trace/ktrace_io.h"
#include "tests/common/trace_samples.h"

namespace karma::trace {
namespace {

TEST(Ktrace, RoundTripTinyMlp) {
  const Iteration it = karma::testing::TinyMlp();
  auto back = DecodeKtrace(EncodeKtrace(it));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, it);
}

TEST(Ktrace, RoundTripRandomIterations) {
  for (uint32_t seed = 0; seed < 300; ++seed) {
    const Iteration it = karma::testing::RandomIteration(seed);
    ASSERT_TRUE(Validate(it).ok()) << seed << ": " << Validate(it).message();
    auto back = DecodeKtrace(EncodeKtrace(it));
    ASSERT_TRUE(back.ok()) << seed << ": " << back.status().message();
    EXPECT_EQ(*back, it) << seed;
  }
}

TEST(Ktrace, EveryTruncationIsRefused) {
  const std::string bytes = EncodeKtrace(karma::testing::TinyMlp());
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto r = DecodeKtrace(std::string_view(bytes).substr(0, len));
    ASSERT_FALSE(r.ok()) << "accepted a file cut to " << len << " of " << bytes.size() << " bytes";
    EXPECT_FALSE(r.status().message().empty());
  }
}

TEST(Ktrace, EveryFlippedByteIsRefused) {
  const std::string bytes = EncodeKtrace(karma::testing::TinyMlp());
  for (size_t pos = 0; pos < bytes.size(); ++pos) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      std::string bad = bytes;
      bad[pos] = static_cast<char>(bad[pos] ^ mask);
      auto r = DecodeKtrace(bad);
      EXPECT_FALSE(r.ok()) << "accepted a flip of byte " << pos << " by " << int(mask);
    }
  }
}

TEST(Ktrace, NewerVersionIsRefusedNamingBothVersions) {
  std::string bytes = EncodeKtrace(karma::testing::TinyMlp());
  const uint32_t newer = ktrace::kFormatVersion + 1;
  std::memcpy(bytes.data() + offsetof(ktrace::FileHeader, version), &newer, sizeof newer);
  auto r = DecodeKtrace(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnsupported);
  EXPECT_NE(r.status().message().find("version " + std::to_string(newer)), std::string::npos);
  EXPECT_NE(r.status().message().find("version " + std::to_string(ktrace::kFormatVersion)), std::string::npos);
}

TEST(Ktrace, ForeignFilesAreRefused) {
  EXPECT_FALSE(DecodeKtrace("").ok());
  EXPECT_FALSE(DecodeKtrace("{\"format\": \"karma-graph\"}").ok());
  EXPECT_NE(DecodeKtrace("NOTATRACEFILE123456").status().message().find("magic"), std::string::npos);
  // Trailing data after the end record.
  std::string bytes = EncodeKtrace(karma::testing::TinyMlp()) + "x";
  EXPECT_FALSE(DecodeKtrace(bytes).ok());
}

TEST(Ktrace, FileRoundTripAndIoErrors) {
  const auto dir = std::filesystem::temp_directory_path() / ("ktrace_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tiny.ktrace").string();
  ASSERT_TRUE(WriteKtraceFile(karma::testing::TinyMlp(), path).ok());
  auto back = ReadKtraceFile(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, karma::testing::TinyMlp());
  auto missing = ReadKtraceFile((dir / "missing.ktrace").string());
  EXPECT_EQ(missing.status().code(), Code::kIoError);
  EXPECT_FALSE(ReadKtraceFile(dir.string()).ok());  // a directory
  EXPECT_FALSE(WriteKtraceFile(karma::testing::TinyMlp(), (dir / "no/such/dir/x.ktrace").string()).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace karma::trace
