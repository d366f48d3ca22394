// Writing and reading .ktrace files (format in ktrace_format.h).
#pragma once

#include <string>
#include <string_view>

#include "ground/common/status.h"
#include "ground/trace/model.h"

namespace karma::trace {

// Serializes an iteration to the .ktrace byte layout.
std::string EncodeKtrace(const Iteration& it);
// Parses .ktrace bytes; refuses newer versions, truncation, CRC mismatches and invalid references.
Result<Iteration> DecodeKtrace(std::string_view bytes);

// Writes atomically: to a temporary file in the same directory, then rename.
Status WriteKtraceFile(const Iteration& it, const std::string& path);
Result<Iteration> ReadKtraceFile(const std::string& path);

// Whole-file helpers shared by the readers and writers of the project.
Result<std::string> ReadWholeFile(const std::string& path);
Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace karma::trace
