// Runs the real `lockstep` binary for the launcher tests.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace lockstep::testing {

struct Launch {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  std::string out, err;  // collected so far
  std::chrono::steady_clock::time_point started;
};

struct Finished {
  int status = -1;  // exit code, or 128 + signal
  std::string out, err;
  double seconds = 0;
};

std::string lockstep_binary();
// Starts `lockstep ARGS...` with stdout and stderr on pipes.
Launch start_lockstep(const std::vector<std::string>& args);
// Reads stdout until `needle` has appeared `count` times; false at the deadline.
bool wait_for_output(Launch& launch, const std::string& needle, int count,
                     std::chrono::seconds deadline = std::chrono::seconds(30));
// The same for stderr.
bool wait_for_error_output(Launch& launch, const std::string& needle,
                           std::chrono::seconds deadline = std::chrono::seconds(30));
// Reads both streams to EOF and reaps the launcher; SIGKILLs it (and the test
// fails) if it is still running after `deadline`.
Finished finish(Launch& launch, std::chrono::seconds deadline = std::chrono::seconds(60));
Finished run_lockstep(const std::vector<std::string>& args);

}  // namespace lockstep::testing
