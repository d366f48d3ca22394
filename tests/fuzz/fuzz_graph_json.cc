// libFuzzer entry point for the karma-graph JSON reader (build with -DKARMA_LIBFUZZER=ON and clang).
#include <cstddef>
#include <cstdint>

#include "ground/trace/analysis.h"
#include "ground/trace/graph_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = karma::trace::ParseGraphJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (r.ok()) (void)karma::trace::Summarize(*r);
  return 0;
}
