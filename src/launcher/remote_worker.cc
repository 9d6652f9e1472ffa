// `lockstep remote-worker`: the shim a remote host runs for one rank. It reads
// the launch block from stdin, checks in with the launcher's rendezvous store
// (which proves this host can reach it), runs the worker and stops it as soon
// as its stdin closes, i.e. when the launcher is gone or tears the job down.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "launcher/job.h"
#include "launcher/output_relay.h"
#include "launcher/remote.h"
#include "launcher/spawn.h"
#include "lockstep/launcher/launcher.h"
#include "lockstep/base/error.h"
#include "lockstep/rendezvous/store.h"

extern char** environ;

namespace lockstep::launcher {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRemoteTermGrace = std::chrono::seconds(2);
constexpr auto kBlockTimeout = std::chrono::seconds(60);

template <typename... Args>
void remote_say(fmt::format_string<Args...> format, Args&&... args) {
  write_fully(STDERR_FILENO,
              "lockstep remote-worker: " + fmt::format(format, std::forward<Args>(args)...) + "\n");
}

// Reads exactly the launch block from stdin (byte by byte past the header is
// not needed: the launcher writes nothing after the block).
std::string read_block() {
  std::string bytes;
  auto deadline = Clock::now() + kBlockTimeout;
  for (size_t total = 0; total == 0 || bytes.size() < total; total = launch_block_size(bytes)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0)
      throw Error(
          "no launch block on stdin within 60 s; this command is started by 'lockstep run'");
    char buf[4096];
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("stdin closed before the launch block was complete");
    bytes.append(buf, static_cast<size_t>(n));
  }
  return bytes;
}

std::map<std::string, std::string> worker_env(const LaunchBlock& block) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : block.env) env[name] = value;
  return env;
}

void check_in(const LaunchBlock& block, const std::map<std::string, std::string>& env) {
  auto address = env.find("LOCKSTEP_RENDEZVOUS");
  auto secret = env.find("LOCKSTEP_SECRET");
  if (address == env.end() || secret == env.end())
    throw Error("launch block lacks LOCKSTEP_RENDEZVOUS or LOCKSTEP_SECRET");
  rendezvous::StoreClient::Options options;
  // Longer than the launcher waits, so that its --start-timeout message (which
  // names every missing host) comes first.
  options.connect_timeout = block.start_timeout + std::chrono::seconds(10);
  try {
    rendezvous::StoreClient client(address->second, rendezvous::decode_secret_hex(secret->second),
                                   options);
    client.set(started_key(block.rank), block.host);
  } catch (const Error& e) {
    throw Error(fmt::format(
        "rank {} on host {} cannot reach the launcher's rendezvous store at {}: {}. Check that "
        "this host can route to that address (lockstep run --rendezvous-addr chooses it)",
        block.rank, block.host, address->second, e.what()));
  }
}

pid_t start_worker(const LaunchBlock& block, const std::map<std::string, std::string>& env_map) {
  std::vector<std::string> env_strings;
  for (const auto& [name, value] : env_map) env_strings.push_back(name + "=" + value);
  std::vector<char*> argv, envp;
  for (const auto& a : block.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  auto path_it = env_map.find("PATH");
  if (path_it != env_map.end()) ::setenv("PATH", path_it->second.c_str(), 1);  // for execvpe
  pid_t shim = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw Error(fmt::format("fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != shim) ::_exit(127);
    reset_signals_for_exec();
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::execvpe(argv[0], argv.data(), envp.data());
    std::string msg = fmt::format("lockstep remote-worker: cannot execute '{}' on host {}: {}\n",
                                  block.argv[0], block.host, std::strerror(errno));
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, msg.data(), msg.size());
    ::_exit(127);
  }
  return pid;
}

int exit_status_of(const LaunchBlock& block, pid_t pid, int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  int sig = WTERMSIG(status);
  const char* abbrev = sigabbrev_np(sig);
  remote_say("rank {} on host {}: the worker (pid {}) was killed by signal {} (SIG{})", block.rank,
             block.host, pid, sig, abbrev ? abbrev : "?");
  return 128 + sig;
}

// Waits for the worker, forwarding signals; stdin closing means the launcher
// is gone, so the worker is stopped (SIGTERM, then SIGKILL after kRemoteTermGrace).
int supervise(const LaunchBlock& block, pid_t pid, int signal_fd) {
  bool stdin_open = true;
  std::optional<Clock::time_point> kill_at;
  while (true) {
    pollfd fds[2] = {{signal_fd, POLLIN, 0}, {stdin_open ? STDIN_FILENO : -1, POLLIN, 0}};
    int timeout = -1;
    if (kill_at)
      timeout = static_cast<int>(std::max<int64_t>(
          0,
          std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at - Clock::now()).count()));
    ::poll(fds, 2, timeout);
    if (fds[1].revents) {
      char buf[256];
      ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        stdin_open = false;
        ::kill(pid, SIGTERM);
        kill_at = Clock::now() + kRemoteTermGrace;
      }
    }
    signalfd_siginfo info;
    while (::read(signal_fd, &info, sizeof info) == sizeof info) {
      if (info.ssi_signo != SIGCHLD) ::kill(pid, static_cast<int>(info.ssi_signo));
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return exit_status_of(block, pid, status);
    if (kill_at && Clock::now() >= *kill_at) {
      ::kill(pid, SIGKILL);
      kill_at.reset();
    }
  }
}

}  // namespace

int remote_worker_main(int, char**) {
  LaunchBlock block;
  try {
    block = decode_launch_block(read_block());
  } catch (const Error& e) {
    remote_say("{}", e.what());
    return 2;
  }
  try {
    auto env = worker_env(block);
    if (!block.cwd.empty() && ::chdir(block.cwd.c_str()) != 0)
      remote_say("rank {} on host {}: no directory {} here ({}); running in {}", block.rank,
                 block.host, block.cwd, std::strerror(errno),
                 env.count("HOME") ? env["HOME"] : "the current one");
    int signal_fd = block_supervision_signals();
    check_in(block, env);
    pid_t pid = start_worker(block, env);
    int status = supervise(block, pid, signal_fd);
    // A killed worker may leave shared memory it had not yet unlinked; its
    // job is going down, so this host's segments of the job can go too.
    if (status > 128) remove_job_shared_memory(env["LOCKSTEP_JOB_ID"]);
    return status;
  } catch (const Error& e) {
    remote_say("{}", e.what());
    return 1;
  }
}

}  // namespace lockstep::launcher
