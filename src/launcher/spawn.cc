#include "launcher/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::launcher {
namespace {

[[noreturn]] void exec_child(const ExecImage& image, int out_fd, int err_fd, int null_fd,
                             pid_t launcher) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(kProgramNotFound);  // launcher already gone
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  ::execve(image.path(), image.argv(), image.envp());
  static const char kMessage[] = "lockstep run: execve failed for the worker program\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  ::_exit(kProgramNotFound);
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
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, sig);
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) throw Error(fmt::format("lockstep: signalfd failed: {}", std::strerror(errno)));
  return fd;
}

SpawnedWorker spawn_worker(const ExecImage& image, int null_fd, int rank) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    throw Error(fmt::format("lockstep run: cannot create pipes for rank {}: {} (raise ulimit -n?)",
                            rank, std::strerror(errno)));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw Error(fmt::format("lockstep run: cannot create pipes for rank {}: {} (raise ulimit -n?)",
                            rank, std::strerror(errno)));
  }
  pid_t launcher = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    throw Error(fmt::format("lockstep run: cannot fork rank {}: {}", rank, std::strerror(errno)));
  }
  if (pid == 0) exec_child(image, out[1], err[1], null_fd, launcher);
  ::setpgid(pid, pid);  // also here, so signalling the group never races the child's setpgid
  ::close(out[1]);
  ::close(err[1]);
  return {pid, out[0], err[0]};
}

}  // namespace lockstep::launcher
