// Starting one worker process. Internal.
//
// Each worker runs in its own process group, so a terminal's Ctrl-C reaches
// only the launcher, which decides what the workers get; PR_SET_PDEATHSIG
// takes them down if the launcher itself is SIGKILLed.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "lockstep/base/error.h"

namespace lockstep::launcher {

inline constexpr int kProgramNotFound = 127;
inline constexpr int kCannotExecute = 126;  // found, but execve refused it (as POSIX shells)

// argv/envp prepared before fork: the child may only make async-signal-safe
// calls because the rendezvous thread is already running.
class ExecImage {
 public:
  ExecImage(std::string path, std::vector<std::string> args, std::vector<std::string> env);
  ExecImage(const ExecImage&) = delete;
  ExecImage& operator=(const ExecImage&) = delete;
  const char* path() const { return path_.c_str(); }
  char* const* argv() const { return argv_.data(); }
  char* const* envp() const { return envp_.data(); }

 private:
  std::string path_;
  std::vector<std::string> args_, env_;
  std::vector<char*> argv_, envp_;
};

struct SpawnedWorker {
  pid_t pid = -1;
  int stdout_fd = -1;  // read ends, owned by the caller
  int stderr_fd = -1;
};

// Blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD in the calling thread (threads
// started later inherit the mask; SIGHUP stays ignored where it was ignored
// at the call, as under nohup), ignores SIGPIPE, and returns a
// non-blocking signalfd that reads them: supervisors poll it beside their
// children's pipes. Throws lockstep::Error if signalfd fails.
int block_supervision_signals();

// The program could not be executed: the message names the path and the
// errno text; exit_status() is 127 (not found) or 126 (any other reason).
class ExecFailed : public Error {
 public:
  ExecFailed(const std::string& path, int error);
  int error() const { return error_; }
  int exit_status() const;

 private:
  int error_;
};

// In a forked child before execve: every signal back to its default action
// and nothing blocked, whatever the launcher inherited or set up.
// Async-signal-safe.
void reset_signals_for_exec() noexcept;

// Forks and execs `image` with stdin from `null_fd` and stdout/stderr on new
// pipes, and returns once the exec has happened. Throws ExecFailed when
// execve fails (the child is reaped), lockstep::Error naming `rank` when
// pipes or fork fail.
SpawnedWorker spawn_worker(const ExecImage& image, int null_fd, int rank);

}  // namespace lockstep::launcher
