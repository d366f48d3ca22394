// Opens any iteration file a command accepts: a .ktrace or a karma-graph JSON, told apart by content.
#pragma once

#include <string>

#include "ground/common/status.h"
#include "ground/trace/model.h"

namespace karma::trace {

enum class FileFormat { kKtrace, kGraphJson };

// Errors carry the path as context.
Result<Iteration> LoadIteration(const std::string& path, FileFormat* format = nullptr);

}  // namespace karma::trace
