// Format detection: the .ktrace magic, else JSON.
#include "ground/trace/load.h"

#include <cstring>

#include "ground/trace/graph_json.h"
#include "ground/trace/ktrace_format.h"
#include "ground/trace/ktrace_io.h"

namespace karma::trace {

Result<Iteration> LoadIteration(const std::string& path, FileFormat* format) {
  auto data = ReadWholeFile(path);
  if (!data.ok()) return data.status();
  const bool is_ktrace = data->size() >= sizeof ktrace::kMagic &&
                         std::memcmp(data->data(), ktrace::kMagic, sizeof ktrace::kMagic) == 0;
  if (format != nullptr) *format = is_ktrace ? FileFormat::kKtrace : FileFormat::kGraphJson;
  auto it = is_ktrace ? DecodeKtrace(*data) : ParseGraphJson(*data);
  if (!it.ok()) return it.status().WithContext(path);
  return it;
}

}  // namespace karma::trace
