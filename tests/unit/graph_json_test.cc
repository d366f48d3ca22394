// Tests of karma-graph JSON import: valid files, every kind of malformed input, and lossless export.
#include <gtest/gtest.h>

#include "ground/trace/graph_json.h"
#include "tests/common/trace_samples.h"

namespace karma::trace {
namespace {

const char* kValid = R"({"format":"karma-graph","version":1,"model":"m","batch":2,"source":"s",
 "tensors":[{"id":0,"bytes":16,"kind":"param","dtype":"float32"},{"id":1,"bytes":32,"kind":"activation","dtype":"float32"}],
 "ops":[{"id":0,"name":"aten::mm","phase":"forward","flops":64,"bytes":48,"reads":[0],"writes":[1]}]})";

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(GraphJson, ParsesTheFormat) {
  auto it = ParseGraphJson(kValid);
  ASSERT_TRUE(it.ok()) << it.status().message();
  EXPECT_EQ(it->model, "m");
  EXPECT_EQ(it->batch, 2u);
  ASSERT_EQ(it->buffers.size(), 2u);
  EXPECT_EQ(it->buffers[1].kind, BufferKind::kActivation);
  ASSERT_EQ(it->ops.size(), 1u);
  EXPECT_EQ(it->ops[0].phase, Phase::kForward);
  EXPECT_EQ(it->ops[0].writes, std::vector<BufferId>{1});
}

struct BadCase {
  const char* what;
  std::string from, to;
  const char* expect;  // substring of the message
};

TEST(GraphJson, MalformedInputIsRefusedWithAPath) {
  const std::string v = kValid;
  const BadCase cases[] = {
      {"wrong format", R"("karma-graph")", R"("onnx")", "format"},
      {"version type", R"("version":1)", R"("version":"1")", "version"},
      {"negative size", R"("bytes":32)", R"("bytes":-32)", "tensors[1].bytes: must not be negative"},
      {"float size", R"("bytes":32)", R"("bytes":3.5)", "tensors[1].bytes"},
      {"string size", R"("bytes":32)", R"("bytes":"32")", "tensors[1].bytes"},
      {"dangling read", R"("reads":[0])", R"("reads":[7])", "ops[0].reads[0]"},
      {"negative id ref", R"("writes":[1])", R"("writes":[-1])", "ops[0].writes[0]"},
      {"reads not array", R"("reads":[0])", R"("reads":0)", "ops[0].reads"},
      {"id mismatch", R"({"id":1,"bytes")", R"({"id":5,"bytes")", "tensors[1].id"},
      {"unknown kind", R"("kind":"activation")", R"("kind":"weights")", "unknown kind 'weights'"},
      {"unknown phase", R"("phase":"forward")", R"("phase":"sideways")", "unknown phase"},
      {"missing name", R"("name":"aten::mm",)", "", "ops[0].name: missing"},
      {"missing ops", R"("ops":[)", R"("opz":[)", "ops: missing"},
      {"tensors not array", R"("tensors":[)", R"("tensors":7,"t":[)", "tensors: expected an array, got 7"},
      {"negative flops", R"("flops":64)", R"("flops":-1)", "flops"},
      {"op not object", R"("ops":[{)", R"("ops":[3,{)", "ops[0]"},
      {"newer version", R"("version":1)", R"("version":2)", "version 2 is newer than this build supports (version 1)"},
      {"unterminated", R"(]})", R"(])", "malformed JSON"},
  };
  for (const BadCase& c : cases) {
    auto r = ParseGraphJson(Replace(v, c.from, c.to));
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << c.what << ": message was: " << r.status().message();
  }
  for (const char* text : {"", "[]", "null", "{", "{\"format\":", "\x01\x02\x03", "{\"format\":\"karma-graph\"}"}) {
    EXPECT_FALSE(ParseGraphJson(text).ok()) << text;
  }
}

TEST(GraphJson, ExportImportIsLossless) {
  for (uint32_t seed = 0; seed < 200; ++seed) {
    const Iteration it = karma::testing::RandomIteration(seed);
    auto back = ParseGraphJson(ToGraphJson(it));
    ASSERT_TRUE(back.ok()) << seed << ": " << back.status().message();
    EXPECT_EQ(*back, it) << seed;
  }
}

}  // namespace
}  // namespace karma::trace
