// Minimal leveled logging to stderr, prefixed with the process's rank.
// LOCKSTEP_LOG_LEVEL = error|warning|info|debug.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace lockstep {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

bool log_enabled(LogLevel level);
void log_line(LogLevel level, std::string_view message);
// The rank shown in the prefix; -1 (the default) shows none.
void set_log_rank(int rank);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(level)) log_line(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace lockstep
