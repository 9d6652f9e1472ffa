// Running a `lockstep run` job from the plan tools: output to a log file,
// progress on stderr, and an early stop once the file we wait for exists.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lockstep::plan_tool {

struct JobResult {
  int exit_code = -1;        // of the job, or 128 + signal
  bool stopped_early = false;  // we stopped it after `stop_when` appeared
  bool timed_out = false;
  double seconds = 0;
};

struct JobSpec {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // added to ours
  std::string log_path;    // stdout and stderr
  std::string stop_when;   // stop the job (SIGTERM) once this file exists; "" = never
  double timeout_s = 600;
  std::string label;       // for progress lines
};

// Blocks until the job ends (or is stopped). Throws lockstep::Error when it
// cannot be started, or after stopping it when SIGINT/SIGTERM arrived (see
// stop_on_signals), so that the caller's destructors clean up.
JobResult run_job(const JobSpec& spec);

// SIGINT and SIGTERM set a flag that run_job() turns into an exception
// instead of killing this process (which would leave namespaces behind).
void stop_on_signals();

// The folder of this executable (where the lockstep binaries live).
std::string bin_dir();

// The last `lines` lines of a file, for error messages.
std::string tail_of(const std::string& path, int lines = 15);

// Rewrites "-np" (the launcher's spelling, which CLI11 cannot declare) to
// "--np" in argv up to a "--", in place.
void accept_np_flag(int argc, char** argv);

// Shell-style quoting for printing a command line.
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace lockstep::plan_tool
