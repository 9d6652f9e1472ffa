// What an exception nobody caught turns into.
//
// engine::init() (and so lockstep::torch::init()) installs a std::terminate
// handler, as does a collective called before init(), that prints one line naming the exception's
// type, its message and the rank, e.g.
//
//   lockstep: uncaught lockstep::MismatchError on rank 1: allreduce 'grad.fc.weight': ...
//
// A lockstep::Error then ends the process with kUncaughtErrorExitCode (no
// core dump: it is a reported failure, not a crash), and `lockstep run`
// reports "rank 1 (pid …) failed with MismatchError: …". Any other exception
// goes on to the previous handler (abort, so bugs keep their core dump).
// std::terminate without an active exception is left to the previous handler.
// Catching lockstep::Error yourself (docs/torch.md, "Errors") always works.
#pragma once

#include <string>
#include <string_view>

namespace lockstep {

inline constexpr int kUncaughtErrorExitCode = 70;  // EX_SOFTWARE, sysexits.h
inline constexpr std::string_view kUncaughtErrorMarker = "lockstep: uncaught ";

// Idempotent and thread-safe.
void install_terminate_handler();

// The line the handler prints (without newline). rank < 0: no rank known.
std::string uncaught_error_line(std::string_view type, std::string_view message, int rank);

// Parses such a line back into "Type: message" with the namespace dropped
// ("MismatchError: ..."), as the launcher reports it; empty when `line` is
// not one.
std::string uncaught_error_summary(std::string_view line);

}  // namespace lockstep
