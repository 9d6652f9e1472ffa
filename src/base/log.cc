#include "lockstep/base/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace lockstep {
namespace {

std::atomic<int> g_rank{-1};

LogLevel level_from_env() {
  const char* env = std::getenv("LOCKSTEP_LOG_LEVEL");
  std::string v = env ? env : "warning";
  if (v == "error") return LogLevel::kError;
  if (v == "info") return LogLevel::kInfo;
  if (v == "debug") return LogLevel::kDebug;
  return LogLevel::kWarning;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = level_from_env();
  return level <= threshold;
}

void set_log_rank(int rank) { g_rank.store(rank); }

void log_line(LogLevel level, std::string_view message) {
  static std::mutex mu;
  std::string line;
  int rank = g_rank.load();
  if (rank >= 0)
    line = fmt::format("lockstep[{}] {}: {}\n", rank, level_name(level), message);
  else
    line = fmt::format("lockstep {}: {}\n", level_name(level), message);
  std::lock_guard lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace lockstep
