// The logger: one atomic level, one write(2) per message so lines from threads do not interleave.
#include "ground/common/log.h"

#include <unistd.h>

#include <atomic>
#include <string>

namespace karma {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

void LogMessage(LogLevel level, std::string_view message) {
  static constexpr const char* kTags[] = {"error: ", "warning: ", "", "debug: "};
  std::string line = "karma: ";
  line += kTags[static_cast<int>(level)];
  line += message;
  line += '\n';
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

bool ParseLogLevel(std::string_view text, LogLevel* level) {
  if (text == "error") *level = LogLevel::kError;
  else if (text == "warn") *level = LogLevel::kWarn;
  else if (text == "info") *level = LogLevel::kInfo;
  else if (text == "debug") *level = LogLevel::kDebug;
  else return false;
  return true;
}

}  // namespace karma
