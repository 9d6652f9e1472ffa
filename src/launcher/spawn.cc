#include "launcher/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::launcher {
namespace {

[[noreturn]] void exec_child(const ExecImage& image, int out_fd, int err_fd, int null_fd,
                             int status_fd, pid_t launcher) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(kProgramNotFound);  // launcher already gone
  reset_signals_for_exec();
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  ::execve(image.path(), image.argv(), image.envp());
  // The launcher reads errno from the status pipe (closed by a successful
  // exec) and reports it; nothing else here is async-signal-safe enough.
  int error = errno;
  [[maybe_unused]] ssize_t n = ::write(status_fd, &error, sizeof error);
  ::_exit(kCannotExecute);
}

// errno from the child's failed execve, or 0 when the exec succeeded.
int read_exec_status(int status_fd) {
  int error = 0;
  ssize_t n;
  do {
    n = ::read(status_fd, &error, sizeof error);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof error) ? error : 0;
}

std::string exec_failure_message(const std::string& path, int error) {
  struct stat st {};
  std::string hint;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    hint = " (it is a directory)";
  else if (error == ENOEXEC)
    hint = " (neither an ELF executable nor a script starting with #!)";
  return fmt::format("cannot execute the program '{}': {}{}", path, std::strerror(error), hint);
}

}  // namespace

ExecImage::ExecImage(std::string path, std::vector<std::string> args, std::vector<std::string> env)
    : path_(std::move(path)), args_(std::move(args)), env_(std::move(env)) {
  for (auto& a : args_) argv_.push_back(a.data());
  argv_.push_back(nullptr);
  for (auto& e : env_) envp_.push_back(e.data());
  envp_.push_back(nullptr);
}

int block_supervision_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&set, sig);
  // `nohup lockstep run … &` starts the launcher with SIGHUP ignored so the
  // job outlives the terminal. A blocked signal is queued even when ignored,
  // so reading SIGHUP from the signalfd would forward it and end the job at
  // logout (rc 129): leave it ignored. Workers still get it at its default.
  struct sigaction hup {};
  if (::sigaction(SIGHUP, nullptr, &hup) != 0 || hup.sa_handler != SIG_IGN) sigaddset(&set, SIGHUP);
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) throw Error(fmt::format("signalfd failed: {}", std::strerror(errno)));
  return fd;
}

void reset_signals_for_exec() noexcept {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  // Ignored signals survive execve: a launcher started in the background by
  // a script (SIGINT and SIGQUIT ignored) would pass that on to the workers,
  // which would then sit through the forwarded SIGINT until SIGKILL.
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP)
      ::sigaction(sig, &dfl, nullptr);  // glibc-internal: EINVAL
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

ExecFailed::ExecFailed(const std::string& path, int error)
    : Error(exec_failure_message(path, error)), error_(error) {}

int ExecFailed::exit_status() const { return error_ == ENOENT ? kProgramNotFound : kCannotExecute; }

SpawnedWorker spawn_worker(const ExecImage& image, int null_fd, int rank) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    throw Error(fmt::format("cannot create pipes for rank {}: {} (raise ulimit -n?)", rank,
                            std::strerror(errno)));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw Error(fmt::format("cannot create pipes for rank {}: {} (raise ulimit -n?)", rank,
                            std::strerror(errno)));
  }
  int status[2];
  if (::pipe2(status, O_CLOEXEC) != 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    throw Error(fmt::format("cannot create pipes for rank {}: {} (raise ulimit -n?)", rank,
                            std::strerror(errno)));
  }
  pid_t launcher = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1], status[0], status[1]}) ::close(fd);
    throw Error(fmt::format("cannot fork rank {}: {}", rank, std::strerror(errno)));
  }
  if (pid == 0) exec_child(image, out[1], err[1], null_fd, status[1], launcher);
  ::setpgid(pid, pid);  // also here, so signalling the group never races the child's setpgid
  for (int fd : {out[1], err[1], status[1]}) ::close(fd);
  const int exec_error = read_exec_status(status[0]);
  ::close(status[0]);
  if (exec_error != 0) {
    ::close(out[0]);
    ::close(err[0]);
    ::waitpid(pid, nullptr, 0);
    throw ExecFailed(image.path(), exec_error);
  }
  return {pid, out[0], err[0]};
}

}  // namespace lockstep::launcher
