// One trial's process: `lockstep run ...` started in its own process group
// with its output in a log file, optionally bound to a set of CPUs (its
// workers inherit the set, and the torch layer's placement plans within it).
// The child dies with the sweep (PR_SET_PDEATHSIG), so a SIGKILLed sweep
// leaves no trial running behind it.
//
// Owns the child until it has been reaped; not thread-safe.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::sweep {

struct LaunchSpec {
  std::vector<std::string> argv;
  std::string log_path;  // stdout and stderr, appended
  std::vector<int> cpus;  // empty: inherit the sweep's affinity
  std::map<std::string, std::string> env;  // added to the sweep's environment
};

class TrialProcess {
 public:
  explicit TrialProcess(const LaunchSpec& spec);  // throws lockstep::Error if fork fails
  TrialProcess(const TrialProcess&) = delete;
  TrialProcess& operator=(const TrialProcess&) = delete;
  ~TrialProcess();  // kills and reaps a child still running

  pid_t pid() const { return pid_; }
  // The wait status once the child has exited (reaps it), else nullopt.
  std::optional<int> poll();
  void signal_group(int sig) const;  // no-op once reaped

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// "exit code 3", "killed by signal 9 (Killed)".
std::string describe_status(int wait_status);

// The last `lines` lines of a file (for failure reports).
std::string tail_of(const std::string& path, int lines);

}  // namespace lockstep::sweep
