#include "lockstep/base/log.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "base/log_rank.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/mutex.h"

namespace lockstep {
namespace {

std::atomic<int> g_rank{-1};

LogLevel level_from_knob() {
  std::string v;
  try {
    v = knob_choice("LOCKSTEP_LOG_LEVEL");
  } catch (const Error& e) {
    // Logging cannot throw at its call sites; say it once instead of
    // quietly logging at another level than the one asked for.
    std::string line = fmt::format("lockstep error: {}; logging at warning level\n", e.what());
    std::fwrite(line.data(), 1, line.size(), stderr);
    return LogLevel::kWarning;
  }
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
  static const LogLevel threshold = level_from_knob();
  return level <= threshold;
}

void set_log_rank(int rank) { g_rank.store(rank); }
int current_log_rank() { return g_rank.load(); }

void log_line(LogLevel level, std::string_view message) {
  // Guards stderr: log lines from several threads stay whole and in order.
  static Mutex mu;
  std::string line;
  int rank = g_rank.load();
  if (rank >= 0)
    line = fmt::format("lockstep[{}] {}: {}\n", rank, level_name(level), message);
  else
    line = fmt::format("lockstep {}: {}\n", level_name(level), message);
  MutexLock lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace lockstep
