// Randomized mutation of valid .ktrace and karma-graph inputs: a reader may accept or refuse, never crash or hang.
#include <gtest/gtest.h>

#include <random>

#include "ground/trace/analysis.h"
#include "ground/trace/graph_json.h"
#include "ground/trace/ktrace_io.h"
#include "tests/common/trace_samples.h"

namespace karma::trace {
namespace {

// One random edit: flip bits, overwrite, insert, delete, duplicate a span, or cut the tail.
std::string Mutate(std::string s, std::mt19937& rng) {
  auto pick = [&](size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const int edits = 1 + static_cast<int>(pick(4));
  for (int e = 0; e < edits; ++e) {
    switch (pick(6)) {
      case 0:
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << pick(8));
        break;
      case 1:
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(pick(256));
        break;
      case 2:
        s.insert(pick(s.size() + 1), 1, static_cast<char>(pick(256)));
        break;
      case 3:
        if (!s.empty()) s.erase(pick(s.size()), 1 + pick(16));
        break;
      case 4:
        if (!s.empty()) {
          const size_t at = pick(s.size()), len = 1 + pick(32);
          s.insert(pick(s.size() + 1), s.substr(at, len));
        }
        break;
      default:
        s.resize(pick(s.size() + 1));
    }
  }
  return s;
}

// Whatever a reader accepts must be a valid iteration that the analyses can run on.
void CheckAccepted(const Result<Iteration>& r) {
  if (!r.ok()) {
    EXPECT_FALSE(r.status().message().empty());
    return;
  }
  EXPECT_TRUE(Validate(*r).ok());
  (void)Summarize(*r);
}

TEST(Mutation, KtraceReaderNeverCrashes) {
  std::mt19937 rng(12345);
  const std::string seeds[] = {EncodeKtrace(karma::testing::TinyMlp()),
                               EncodeKtrace(karma::testing::RandomIteration(7)),
                               EncodeKtrace(karma::testing::RandomIteration(8, 200, 400))};
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string input = Mutate(seeds[i % 3], rng);
    auto r = DecodeKtrace(input);
    accepted += r.ok();
    CheckAccepted(r);
  }
  // CRCs catch almost every edit; the few accepted inputs are edits that left the bytes unchanged.
  EXPECT_LT(accepted, 200);
}

TEST(Mutation, GraphJsonReaderNeverCrashes) {
  std::mt19937 rng(54321);
  const std::string seeds[] = {ToGraphJson(karma::testing::TinyMlp()),
                               ToGraphJson(karma::testing::RandomIteration(3))};
  for (int i = 0; i < 20000; ++i) CheckAccepted(ParseGraphJson(Mutate(seeds[i % 2], rng)));
}

TEST(Mutation, DeepNestingAndHugeNumbersAreRefused) {
  EXPECT_FALSE(ParseGraphJson(std::string(100000, '[') + std::string(100000, ']')).ok());
  EXPECT_FALSE(ParseGraphJson(R"({"format":"karma-graph","version":99999999999999999999999})").ok());
  const std::string huge_count =
      R"({"format":"karma-graph","version":1,"tensors":[{"id":0,"bytes":1e400,"kind":"param"}],"ops":[]})";
  EXPECT_FALSE(ParseGraphJson(huge_count).ok());
}

}  // namespace
}  // namespace karma::trace
