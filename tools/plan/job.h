// Running a `lockstep run` job from the plan tools: output to a log file,
// progress on stderr, and an early stop once the file we wait for exists.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lockstep::plan_tool {

struct JobResult {
  int exit_code = -1;          // of the job, or 128 + signal
  bool stopped_early = false;  // we stopped it after `stop_when` appeared
  bool timed_out = false;
  double seconds = 0;
};

struct JobSpec {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // added to ours
  std::string log_path;                                  // stdout and stderr
  std::string stop_when;  // stop the job (SIGTERM) once this file exists; "" = never
  double timeout_s = 600;
  std::string label;  // for progress lines
};

// Blocks until the job ends (or is stopped). Throws lockstep::Error when it
// cannot be started, or after stopping it when SIGINT/SIGTERM arrived (after
// tools::catch_stop_signals(), which turns them into a flag instead of killing
// this process and leaving namespaces behind), so that the caller's
// destructors clean up.
JobResult run_job(const JobSpec& spec);

// The last lines of a job's log, indented, for error messages.
std::string tail_of(const std::string& log_path);

// Rewrites "-np" (the launcher's spelling, which CLI11 cannot declare) to
// "--np" in argv up to a "--", in place.
void accept_np_flag(int argc, char** argv);

// Shell-style quoting for printing a command line.
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace lockstep::plan_tool
