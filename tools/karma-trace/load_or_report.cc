// Loading an input file for a subcommand, with the error printed once in the tool's format.
#include "ground/trace/load.h"
#include "tools/karma-trace/commands.h"

namespace karma::tools {

bool LoadOrReport(const std::string& path, trace::Iteration* out) {
  auto it = trace::LoadIteration(path);
  if (!it.ok()) {
    Fail(it.status());
    return false;
  }
  *out = std::move(it).value();
  return true;
}

}  // namespace karma::tools
