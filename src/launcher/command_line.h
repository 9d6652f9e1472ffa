// Splitting `lockstep run`'s command line into the launcher's flags and the
// worker program, and the checks on flag values that CLI11 cannot phrase.
// Internal.
//
// The program starts at the first word that is neither a flag nor a flag's
// value, or after the first "--". Everything from there on reaches the
// program untouched: `lockstep run -np 2 prog -np 5 -x A=1 -- b` runs
// `prog -np 5 -x A=1 -- b`.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::launcher {

struct CommandLine {
  std::vector<std::string> flags;    // the launcher's part, "-np" already renamed
  std::vector<std::string> program;  // argv of every worker
  bool has_separator = false;        // the program followed "--"
};

// `takes_value(flag)` says whether a flag given without "=VALUE" consumes
// the next word (unknown flags: false; CLI11 then reports them).
CommandLine split_command_line(const std::vector<std::string>& args,
                               const std::function<bool(std::string_view)>& takes_value);

// A whole number in [min, max] given to `flag`; InvalidArgument naming the
// flag, the value and the range otherwise.
int parse_int_flag(std::string_view flag, std::string_view text, int min, int max);
// A number of seconds in (0, max]; InvalidArgument naming the flag otherwise.
double parse_seconds_flag(std::string_view flag, std::string_view text, double max);
// Longest timeout a flag accepts: a week is "never" for one collective, and
// larger values overflow the millisecond deadlines downstream.
inline constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600;
// Most intra-op threads --threads-per-worker accepts (beyond any host's CPUs).
inline constexpr int kMaxThreadsPerWorker = 4096;

}  // namespace lockstep::launcher
