// Leveled logging to stderr ("karma: ..."), with the level taken from KARMA_LOG.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace karma {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
inline bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(GetLogLevel()); }
void LogMessage(LogLevel level, std::string_view message);
// Parses error|warn|info|debug; false when the text is none of them.
bool ParseLogLevel(std::string_view text, LogLevel* level);

}  // namespace karma

#define KARMA_LOG(level, ...)                                                     \
  do {                                                                            \
    if (::karma::LogEnabled(::karma::LogLevel::level))                            \
      ::karma::LogMessage(::karma::LogLevel::level, fmt::format(__VA_ARGS__));    \
  } while (0)
