// Child processes for the `lockstep` tools that run other commands (`plan
// validate`, `profile` and `bench fit` run `lockstep run` jobs, `sweep` runs
// trials): each child in its own process group, so one signal reaches
// `lockstep run` and every worker it started, its output in a log file and
// stdin on /dev/null. Plus what such tools report and catch around them:
// the wait status in words, the log's last lines, and SIGINT/SIGTERM as a
// flag instead of a death that would leave the children behind.
//
// ChildProcess owns its child until it has been reaped; not thread-safe.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lockstep::tools {

struct ChildSpec {
  std::vector<std::string> argv;                         // argv[0] is looked up in PATH
  std::vector<std::pair<std::string, std::string>> env;  // added to this process's
  std::string log_path;                                  // stdout and stderr
  bool append_log = false;                               // else the log is truncated
  std::vector<int> cpus;  // empty: inherit this process's CPU affinity
  // SIGKILL the child when this process dies (PR_SET_PDEATHSIG): a SIGKILLed
  // parent leaves no child running behind it.
  bool dies_with_parent = false;
};

class ChildProcess {
 public:
  // Starts the child; throws lockstep::Error (naming the log or the fork's
  // error) when it cannot, InvalidArgument for an empty argv. A command that
  // cannot be executed exits 127 with a line in the log saying so.
  explicit ChildProcess(const ChildSpec& spec);
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();  // SIGKILLs the group and reaps a child still running

  pid_t pid() const { return pid_; }
  // The wait status once the child has exited (reaping it), else nullopt.
  std::optional<int> poll();
  void signal(int sig) const;        // to the child alone (`lockstep run` cleans up after it)
  void signal_group(int sig) const;  // to its whole process group; both no-ops once reaped

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// "exit code 3", "killed by signal 9 (Killed)".
std::string describe_status(int wait_status);
// The exit code, or 128 + the signal that ended it (as shells report it).
int exit_code_of(int wait_status);

// The last `lines` lines of a file, each after `prefix`, for error messages;
// "" when it cannot be read.
std::string tail_of(const std::string& path, int lines, std::string_view prefix = "");

// SIGINT and SIGTERM (and SIGHUP with `hangup`) set a flag that the tool's
// loop polls (stop_requested), so it stops its children and cleans up
// instead of dying with them running.
void catch_stop_signals(bool hangup = false);
bool stop_requested();

}  // namespace lockstep::tools
