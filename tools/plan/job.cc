#include "plan/job.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::plan_tool {

using Clock = std::chrono::steady_clock;

namespace {
volatile sig_atomic_t g_interrupted = 0;
void on_signal(int) { g_interrupted = 1; }
}  // namespace

void stop_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

std::string bin_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string path(buf);
  return path.substr(0, path.rfind('/'));
}

std::string tail_of(const std::string& path, int lines) {
  std::ifstream in(path);
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += "    | " + l + "\n";
  return out;
}

void accept_np_flag(int argc, char** argv) {
  static char np[] = "--np";
  for (int i = 1; i < argc && std::string(argv[i]) != "--"; ++i)
    if (std::string(argv[i]) == "-np") argv[i] = np;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    bool plain = !a.empty() && a.find_first_of(" '\"$\\*?;&|<>(){}") == std::string::npos;
    out += (out.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return out;
}

namespace {

pid_t start(const JobSpec& spec) {
  int log = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) throw Error(fmt::format("cannot write the log {}", spec.log_path));
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    ::close(log);
    throw Error("fork failed");
  }
  if (pid == 0) {
    setpgid(0, 0);  // our own group: stopping the job reaches all of it
    dup2(log, 1);
    dup2(log, 2);
    int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    execvpe(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  ::close(log);
  return pid;
}

}  // namespace

JobResult run_job(const JobSpec& spec) {
  if (!spec.stop_when.empty()) std::filesystem::remove(spec.stop_when);
  const auto t0 = Clock::now();
  pid_t pid = start(spec);
  JobResult r;
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  double next_progress = 15;
  bool signalled = false;
  double signalled_at = 0;
  for (;;) {
    int status = 0;
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    const double t = elapsed();
    if (g_interrupted) {
      // `lockstep run` stops its workers and removes their shared memory on
      // SIGTERM; SIGKILL only if it has not finished within 5 s.
      kill(pid, SIGTERM);
      for (int i = 0; i < 100 && waitpid(pid, nullptr, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, WNOHANG);
      throw Error(fmt::format("interrupted while running {}", spec.label));
    }
    if (!signalled && !spec.stop_when.empty() && std::filesystem::exists(spec.stop_when)) {
      // SIGTERM to `lockstep run`: it stops its workers and cleans up.
      kill(pid, SIGTERM);
      signalled = true;
      signalled_at = t;
      r.stopped_early = true;
    }
    if (!signalled && t > spec.timeout_s) {
      kill(pid, SIGTERM);
      signalled = true;
      signalled_at = t;
      r.timed_out = true;
    }
    if (signalled && t - signalled_at > 10) kill(-pid, SIGKILL);  // never hang on a stuck job
    if (t > next_progress) {
      fmt::print(stderr, "  ... {} still running ({:.0f} s)\n", spec.label, t);
      next_progress += 15;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  r.seconds = elapsed();
  return r;
}

}  // namespace lockstep::plan_tool
