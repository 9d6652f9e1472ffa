// The remote workers' start: each goes through the remote-exec command with
// its launch block on the shim's stdin, and must check in with the store
// within --start-timeout (Supervisor, supervisor.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/remote.h"
#include "launcher/say.h"
#include "launcher/supervisor.h"
#include "lockstep/base/error.h"
#include "lockstep/base/executable.h"

extern char** environ;

namespace lockstep::launcher {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> launcher_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  return env;
}

}  // namespace

SpawnedWorker Supervisor::spawn_remote(Worker& w) {
  std::vector<std::string> argv =
      remote_command(spec_.remote_exec, w.where.host, executable_path());
  std::string exec_path = resolve_program(argv[0]);
  if (exec_path.empty())
    throw Error(fmt::format("cannot find the remote-exec command '{}' (--remote-exec)", argv[0]));
  LaunchBlock block;
  block.host = w.where.host;
  block.rank = w.index;
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd)) block.cwd = cwd;
  block.start_timeout = spec_.start_timeout;
  block.argv = spec_.program;
  block.env = environment_of(w);
  int launch[2];
  if (::pipe2(launch, O_CLOEXEC) != 0)
    throw Error(fmt::format("cannot create a pipe for rank {}: {}", w.rank, std::strerror(errno)));
  SpawnedWorker child;
  try {
    // The remote-exec command itself gets the launcher's environment: the
    // job's identity and secret travel only in the launch block.
    child = spawn_worker(ExecImage(exec_path, argv, launcher_environment()), launch[0], w.index);
  } catch (...) {
    ::close(launch[0]);
    ::close(launch[1]);
    throw;
  }
  ::close(launch[0]);
  // Small (LOCKSTEP_* variables and argv): fits the pipe, so this never blocks.
  write_fully(launch[1], encode_launch_block(block));
  w.launch_fd = launch[1];
  w.started = false;
  return child;
}

// Remote ranks prove they reached the store; at --start-timeout the hosts
// that have not are named and the job is stopped.
void Supervisor::check_started() {
  if (!deadlines_.armed(Deadline::kStartTimeout) ||
      !deadlines_.passed(Deadline::kStartCheck, Clock::now()))
    return;
  std::vector<Worker*> pending;
  for (auto& w : workers_)
    if (!w.started && w.running) pending.push_back(&w);
  for (auto* w : pending) {
    std::string key = started_key(w->index);
    w->started = store_client_->check(std::span<const std::string>(&key, 1));
  }
  std::erase_if(pending, [](Worker* w) { return w->started; });
  if (pending.empty() || first_failure_code_ || interrupted_by_) {
    deadlines_.disarm(Deadline::kStartTimeout);
    deadlines_.disarm(Deadline::kStartCheck);
    return;
  }
  deadlines_.arm(Deadline::kStartCheck, Clock::now() + std::chrono::milliseconds(200));
  if (!deadlines_.passed(Deadline::kStartTimeout, Clock::now())) return;
  std::map<std::string, std::vector<int>> by_host;
  for (auto* w : pending) by_host[w->where.host].push_back(w->rank);
  std::string missing;
  for (const auto& [host, ranks] : by_host)
    missing +=
        fmt::format("{}{} (ranks {})", missing.empty() ? "" : ", ", host, fmt::join(ranks, ","));
  say("host(s) {} did not start and reach the rendezvous store at {} within {} s "
      "(--start-timeout); check the remote-exec command ('{}'), that lockstep is installed at the "
      "same path there, and that those hosts can reach this address; stopping the job",
      missing, job_.rendezvous, spec_.start_timeout.count(), spec_.remote_exec);
  deadlines_.disarm(Deadline::kStartTimeout);
  deadlines_.disarm(Deadline::kStartCheck);
  first_failure_code_ = 1;
  deadlines_.arm(Deadline::kTerm, Clock::now());
}

}  // namespace lockstep::launcher
