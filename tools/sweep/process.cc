#include "sweep/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::sweep {
namespace {

// Runs in the forked child: only async-signal-safe calls until execvp.
[[noreturn]] void exec_child(const LaunchSpec& spec, const std::vector<char*>& argv, pid_t parent,
                             int log_fd) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the sweep died before prctl
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  if (!spec.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : spec.cpus) CPU_SET(c, &set);
    sched_setaffinity(0, sizeof(set), &set);
  }
  execvp(argv[0], argv.data());
  const char* msg = "lockstep sweep: cannot execute the trial command\n";
  (void)!write(STDERR_FILENO, msg, std::strlen(msg));
  _exit(127);
}

}  // namespace

TrialProcess::TrialProcess(const LaunchSpec& spec) {
  if (spec.argv.empty()) throw InvalidArgument("trial command is empty");
  const int log_fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0)
    throw Error(fmt::format("cannot open trial log {}: {}", spec.log_path, std::strerror(errno)));
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& [k, v] : spec.env) setenv(k.c_str(), v.c_str(), 1);  // inherited by the fork
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) exec_child(spec, argv, parent, log_fd);
  const int saved = errno;
  for (const auto& kv : spec.env) unsetenv(kv.first.c_str());
  ::close(log_fd);
  if (pid_ < 0) throw Error(fmt::format("cannot fork a trial: {}", std::strerror(saved)));
  setpgid(pid_, pid_);  // also in the child: whichever runs first
}

TrialProcess::~TrialProcess() {
  if (pid_ <= 0 || reaped_) return;
  signal_group(SIGKILL);
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

std::optional<int> TrialProcess::poll() {
  if (reaped_) return std::nullopt;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r != pid_) return std::nullopt;
  reaped_ = true;
  return status;
}

void TrialProcess::signal_group(int sig) const {
  if (pid_ > 0 && !reaped_) ::kill(-pid_, sig);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("wait status {}", status);
}

std::string tail_of(const std::string& path, int lines) {
  std::ifstream in(path);
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += l + "\n";
  return out;
}

}  // namespace lockstep::sweep
