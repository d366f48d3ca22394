// The shared real-model workloads: op counts and ideal in-core peaks as published, same through .ktrace.
#include <gtest/gtest.h>

#include "ground/common/units.h"
#include "ground/trace/analysis.h"
#include "ground/trace/ktrace_io.h"
#include "ground/trace/load.h"

namespace karma::trace {
namespace {

struct Expected {
  const char* file;
  size_t ops;
  double peak_gib;
  double persistent_gib;
};

constexpr Expected kWorkloads[] = {
    {"resnet50-b128.json", 1536, 10.62, 0.36},
    {"vgg16-b64.json", 339, 5.94, 1.58},
    {"gpt2small-b8-s1024.json", 4138, 24.87, 3.63},
};

TEST(Workloads, PublishedFiguresAndKtraceRoundTrip) {
  for (const Expected& w : kWorkloads) {
    const std::string path = std::string(KARMA_TEST_DATA) + "/workloads/" + w.file;
    FileFormat format{};
    auto it = LoadIteration(path, &format);
    ASSERT_TRUE(it.ok()) << it.status().message();
    EXPECT_EQ(format, FileFormat::kGraphJson);
    const Summary s = Summarize(*it);
    EXPECT_EQ(it->ops.size(), w.ops) << w.file;
    EXPECT_NEAR(ToGiB(s.memory.peak_bytes), w.peak_gib, 0.005) << w.file;
    EXPECT_NEAR(ToGiB(s.memory.persistent_bytes), w.persistent_gib, 0.005) << w.file;

    auto back = DecodeKtrace(EncodeKtrace(*it));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, *it);
    EXPECT_EQ(Summarize(*back).memory.peak_bytes, s.memory.peak_bytes);
  }
}

}  // namespace
}  // namespace karma::trace
