// Starting one worker process. Internal.
//
// Each worker runs in its own process group, so a terminal's Ctrl-C reaches
// only the launcher, which decides what the workers get; PR_SET_PDEATHSIG
// takes them down if the launcher itself is SIGKILLed.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace lockstep::launcher {

inline constexpr int kProgramNotFound = 127;

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
// started later inherit the mask), ignores SIGPIPE, and returns a
// non-blocking signalfd that reads them: supervisors poll it beside their
// children's pipes. Throws lockstep::Error if signalfd fails.
int block_supervision_signals();

// Forks and execs `image` with stdin from `null_fd` and stdout/stderr on new
// pipes. Throws lockstep::Error naming `rank` when pipes or fork fail.
SpawnedWorker spawn_worker(const ExecImage& image, int null_fd, int rank);

}  // namespace lockstep::launcher
