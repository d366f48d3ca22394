// karma-graph v1 JSON (../shared/formats/karma-graph.md): import into, and export from, the trace model.
//
// The exporter writes karma-graph v1 plus optional extension fields that carry what a recorded trace
// has and the graph format lacks (op kind, stream, measured duration, touches, allocation site and
// address, events); the importer reads them back, so JSON -> .ktrace -> JSON loses nothing.
#pragma once

#include <string>
#include <string_view>

#include "ground/common/status.h"
#include "ground/trace/model.h"

namespace karma::trace {

inline constexpr int kGraphFormatVersion = 1;

Result<Iteration> ParseGraphJson(std::string_view text);
std::string ToGraphJson(const Iteration& it);

}  // namespace karma::trace
