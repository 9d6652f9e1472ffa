#include "tools/common/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <fstream>

#include <fmt/format.h>

#include "lockstep/base/error.h"

extern char** environ;

namespace lockstep::tools {
namespace {

volatile sig_atomic_t g_stop = 0;
void on_stop_signal(int) { g_stop = 1; }

// What the forked child needs, built before fork(): the child may only make
// async-signal-safe calls until it has exec'd.
struct ChildImage {
  std::vector<std::string> env_strings;
  std::vector<char*> argv, envp;
  std::string exec_failed;  // the line written to the log when exec fails

  explicit ChildImage(const ChildSpec& spec) {
    // spec.env replaces a variable this process has: getenv() would find
    // whichever copy comes first.
    auto overridden = [&](std::string_view entry) {
      for (const auto& kv : spec.env)
        if (entry.size() > kv.first.size() && entry.starts_with(kv.first) &&
            entry[kv.first.size()] == '=')
          return true;
      return false;
    };
    for (char** e = environ; *e; ++e)
      if (!overridden(*e)) env_strings.emplace_back(*e);
    for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    exec_failed = fmt::format("cannot execute {}\n", spec.argv[0]);
  }
};

[[noreturn]] void exec_child(const ChildSpec& spec, const ChildImage& image, pid_t parent,
                             int log_fd) {
  setpgid(0, 0);  // its own group: a signal to the group reaches all it starts
  if (spec.dies_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl
  }
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  if (!spec.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : spec.cpus) CPU_SET(c, &set);
    sched_setaffinity(0, sizeof(set), &set);
  }
  execvpe(image.argv[0], image.argv.data(), image.envp.data());
  (void)!write(STDERR_FILENO, image.exec_failed.data(), image.exec_failed.size());
  _exit(127);
}

}  // namespace

ChildProcess::ChildProcess(const ChildSpec& spec) {
  if (spec.argv.empty()) throw InvalidArgument("the command to run is empty");
  const ChildImage image(spec);
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (spec.append_log ? O_APPEND : O_TRUNC);
  const int log_fd = ::open(spec.log_path.c_str(), flags, 0644);
  if (log_fd < 0)
    throw Error(fmt::format("cannot write the log {}: {}", spec.log_path, std::strerror(errno)));
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) exec_child(spec, image, parent, log_fd);
  const int saved = errno;
  ::close(log_fd);
  if (pid_ < 0)
    throw Error(fmt::format("cannot fork to run {}: {}", spec.argv[0], std::strerror(saved)));
  setpgid(pid_, pid_);  // also in the child: whichever runs first
}

ChildProcess::~ChildProcess() {
  if (pid_ <= 0 || reaped_) return;
  signal_group(SIGKILL);
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

std::optional<int> ChildProcess::poll() {
  if (reaped_ || pid_ <= 0) return std::nullopt;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  reaped_ = true;
  return status;
}

void ChildProcess::signal(int sig) const {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

void ChildProcess::signal_group(int sig) const {
  if (pid_ > 0 && !reaped_) ::kill(-pid_, sig);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("wait status {}", status);
}

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string tail_of(const std::string& path, int lines, std::string_view prefix) {
  std::ifstream in(path);
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += fmt::format("{}{}\n", prefix, l);
  return out;
}

void catch_stop_signals(bool hangup) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (hangup) sigaction(SIGHUP, &sa, nullptr);
}

bool stop_requested() { return g_stop != 0; }

}  // namespace lockstep::tools
