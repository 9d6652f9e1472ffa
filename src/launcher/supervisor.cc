// The Supervisor's poll loop and its processes: start, relay, signal, reap,
// tear down (supervisor.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/say.h"
#include "launcher/supervisor.h"
#include "lockstep/base/error.h"
#include "lockstep/base/terminate.h"

namespace lockstep::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// After SIGTERM (forwarded or on failure) workers get this long before SIGKILL,
// which keeps a whole job's teardown well within 5 s.
constexpr auto kTermGrace = std::chrono::seconds(2);
// After one worker fails, the others first get this long to exit on their
// own: lockstep workers notice a dead peer within milliseconds and print
// their own error (naming the rank they lost), which a SIGTERM would cut off.
// Across hosts a survivor may first wait on a live peer that is itself
// unwinding (measured: up to ~1 s over veth), hence 2 s; 2 s + kTermGrace
// keeps the teardown under 5 s.
constexpr auto kPeerGrace = std::chrono::seconds(2);
// After the last worker is reaped, output still buffered in pipes held by
// processes outside its group gets this long to arrive.
constexpr auto kDrainGrace = std::chrono::seconds(1);

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

}  // namespace

Supervisor::~Supervisor() {
  signal_all(SIGKILL);  // only when run() did not finish: it reaps everyone
  for (auto& w : workers_) {
    close_launch_fd(w);
    for (auto& s : w.streams)
      if (s.fd >= 0) ::close(s.fd);
  }
}

void Supervisor::close_launch_fd(Worker& w) {
  if (w.launch_fd >= 0) ::close(w.launch_fd);
  w.launch_fd = -1;
}

rendezvous::StoreClient& Supervisor::store_client() {
  if (!store_client_) {
    rendezvous::StoreClient::Options options;
    options.connect_timeout = std::chrono::seconds(10);
    store_client_.emplace(job_.rendezvous, rendezvous::decode_secret_hex(job_.secret_hex), options);
  }
  return *store_client_;
}

void Supervisor::start(const std::string& path) {
  path_ = path;
  if (spec_.elastic.enabled()) {
    elastic_.emplace(spec_.elastic, store_client(), deadlines_, multi_host_);
    elastic_->start(placements_);
  }
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  workers_.reserve(spec_.num_proc);
  for (int rank = 0; rank < spec_.num_proc && !interrupted_by_ && !first_failure_code_; ++rank)
    spawn(rank, placements_[rank], null_fd);
  if (null_fd >= 0) ::close(null_fd);
  bool any_remote =
      std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return !w.started; });
  if (any_remote) {
    store_client();
    deadlines_.arm(Deadline::kStartTimeout, Clock::now() + spec_.start_timeout);
    deadlines_.arm(Deadline::kStartCheck, Clock::now());
  }
}

// The worker's identity in its first generation: an elastic worker's rank
// comes from the generation the launcher last published.
std::vector<std::pair<std::string, std::string>> Supervisor::environment_of(const Worker& w) const {
  auto env = worker_environment(spec_, job_, w.rank, w.where);
  return elastic_ ? elastic_->environment_of(w.index, env) : env;
}

void Supervisor::spawn(int index, const Placement& where, int null_fd) {
  Worker w;
  w.index = index;
  w.rank = index;
  w.where = where;
  if (elastic_)
    if (auto rank = elastic_->rank_of(index)) w.rank = *rank;
  SpawnedWorker child =
      w.where.local
          ? spawn_worker(ExecImage(path_, spec_.program, as_env_strings(environment_of(w))),
                         null_fd, index)
          : spawn_remote(w);
  w.pid = child.pid;
  w.running = true;
  w.streams.push_back(
      {child.stdout_fd, OutputRelay(STDOUT_FILENO, index, spec_.prefix_output), false, {}});
  w.streams.push_back(
      {child.stderr_fd, OutputRelay(STDERR_FILENO, index, spec_.prefix_output), true, {}});
  workers_.push_back(std::move(w));
  if (spec_.verbose)
    say("{} started as pid {}", rank_label(workers_.back(), multi_host_), child.pid);
}

void Supervisor::signal_all(int sig) {
  for (auto& w : workers_) {
    if (!w.running) continue;
    ::kill(-w.pid, sig);
    // A remote shim stops its worker when its stdin closes, even where the
    // signal only reached the local end of an ssh.
    close_launch_fd(w);
  }
}

void Supervisor::on_signal() {
  signalfd_siginfo info;
  while (::read(signal_fd_, &info, sizeof info) == sizeof info) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      reap();
    } else if (!interrupted_by_) {
      interrupted_by_ = sig;
      say("received {}; forwarding it to the workers", signal_name(sig));
      signal_all(sig);
      deadlines_.arm_once(Deadline::kKill, Clock::now() + kTermGrace);
    } else {
      say("received {} again; killing the workers", signal_name(sig));
      signal_all(SIGKILL);
    }
  }
}

// Workers reaped in one pass are handled signal deaths first, then failures,
// then clean exits: when the launcher is slow to wake (a loaded host), a
// killed worker and the survivor that exited because it saw the death can be
// reaped together, and the job's failure must name the cause, not the
// survivor that happened to have the lower rank.
void Supervisor::reap() {
  std::vector<Worker*> exited;
  for (auto& w : workers_) {
    if (!w.running) continue;
    int status = 0;
    pid_t r = ::waitpid(w.pid, &status, WNOHANG);
    if (r == w.pid) {
      w.running = false;
      w.wait_status = status;
      exited.push_back(&w);
    }
  }
  auto severity = [](const Worker* w) {
    if (WIFSIGNALED(w->wait_status)) return 0;
    return WEXITSTATUS(w->wait_status) != 0 ? 1 : 2;
  };
  std::stable_sort(exited.begin(), exited.end(),
                   [&](const Worker* a, const Worker* b) { return severity(a) < severity(b); });
  for (Worker* w : exited) on_exit(*w);
}

void Supervisor::on_exit(Worker& w) {
  int status = w.wait_status;
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::string how = WIFEXITED(status)
                        ? fmt::format("exited with code {}", WEXITSTATUS(status))
                        : fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                                      signal_name(WTERMSIG(status)));
  const std::string note = failure_note(w);
  if (!note.empty())
    how = WIFEXITED(status) && WEXITSTATUS(status) == kUncaughtErrorExitCode
              ? "failed with " + note
              : how + " after an uncaught " + note;
  // Leftovers of a finished worker's group (background children) go with it.
  ::kill(-w.pid, SIGKILL);
  close_launch_fd(w);
  std::string who = rank_label(w, multi_host_);
  if (w.removing) {
    say("{} (pid {}), removed from the job, {}", who, w.pid, how);
    return;
  }
  if (ok && elastic_) elastic_->on_success(w);
  bool first_failure = !ok && !interrupted_by_ && !first_failure_code_;
  // Once a worker finished, a failure fails the job: nothing re-forms.
  if (first_failure && elastic_ && !elastic_->finishing()) {
    if (is_program_bug(note, exit_code_of(status)))
      return stop_job(elastic_->on_program_bug(w, how));
    return elastic_->on_failure(w, how);
  }
  if (!first_failure) {
    if (spec_.verbose) say("{} (pid {}) {}", who, w.pid, how);
    return;
  }
  say("{} (pid {}) {}; stopping the other workers{}", who, w.pid, how,
      multi_host_ ? " on every host" : "");
  stop_job(exit_code_of(status));
}

// The job failed with `code`: the other workers get kPeerGrace to notice and
// exit on their own before SIGTERM.
void Supervisor::stop_job(int code) {
  first_failure_code_ = code;
  deadlines_.arm(Deadline::kTerm, Clock::now() + kPeerGrace);
}

// Re-forms or scales the elastic job; starts the workers it asks for.
void Supervisor::poll_elastic() {
  auto decision = elastic_->poll(workers_, Clock::now());
  if (decision.stop_code) return stop_job(*decision.stop_code);
  if (decision.start.empty()) return;
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (const auto& where : decision.start) spawn(static_cast<int>(workers_.size()), where, null_fd);
  if (null_fd >= 0) ::close(null_fd);
}

void Supervisor::on_deadlines() {
  auto now = Clock::now();
  if (deadlines_.take_due(Deadline::kTerm, now)) {
    if (any_running()) {
      signal_all(SIGTERM);
      deadlines_.arm_once(Deadline::kKill, now + kTermGrace);
    }
  }
  if (deadlines_.take_due(Deadline::kKill, now)) {
    if (any_running()) {
      say("workers still running {} s after being signalled; sending SIGKILL",
          std::chrono::duration_cast<std::chrono::seconds>(kTermGrace).count());
      signal_all(SIGKILL);
    }
  }
}

void Supervisor::read_stream(Stream& s) {
  char buf[64 << 10];
  ssize_t n = ::read(s.fd, buf, sizeof buf);
  if (n > 0) {
    s.relay.feed(std::string_view(buf, static_cast<size_t>(n)));
    if (s.watch_failures) s.failures.feed(std::string_view(buf, static_cast<size_t>(n)));
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    s.relay.finish();
    ::close(s.fd);
    s.fd = -1;
  }
}

// What the worker's terminate handler said, once everything it wrote is read:
// it has exited, so its stderr holds all of it (others may keep the pipe open).
std::string Supervisor::failure_note(Worker& w) {
  for (auto& s : w.streams) {
    if (!s.watch_failures) continue;
    // Bounded: a background child could keep writing to the inherited pipe.
    for (int reads = 0; s.fd >= 0 && reads < 64; ++reads) {
      pollfd p{s.fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
      read_stream(s);
    }
    return s.failures.note();
  }
  return {};
}

bool Supervisor::any_running() const {
  for (const auto& w : workers_)
    if (w.running) return true;
  return false;
}

bool Supervisor::any_stream_open() const {
  for (const auto& w : workers_)
    for (const auto& s : w.streams)
      if (s.fd >= 0) return true;
  return false;
}

void Supervisor::run() {
  std::vector<pollfd> fds;
  std::vector<Stream*> polled;
  auto draining = [&] {
    return deadlines_.armed(Deadline::kDrain) && !deadlines_.passed(Deadline::kDrain, Clock::now());
  };
  // An elastic failure is judged kReformDebounce after it: when the last
  // workers fail together, the loop must live until then, or the job ended
  // with exit status 0 and no word (issue 30: every worker exited 1).
  auto reform_due = [&] {
    return elastic_ && !first_failure_code_ && !interrupted_by_ &&
           deadlines_.armed(Deadline::kReform);
  };
  while (any_running() || (any_stream_open() && draining()) || reform_due()) {
    fds.assign(1, pollfd{signal_fd_, POLLIN, 0});
    polled.clear();
    for (auto& w : workers_)
      for (auto& s : w.streams)
        if (s.fd >= 0) {
          fds.push_back({s.fd, POLLIN, 0});
          polled.push_back(&s);
        }
    auto wakeup = deadlines_.earliest(
        {Deadline::kKill, Deadline::kTerm, Deadline::kDrain, Deadline::kStartCheck});
    if (elastic_ && !first_failure_code_) wakeup = earlier(wakeup, elastic_->next_wakeup());
    if (::poll(fds.data(), fds.size(), poll_timeout_ms(wakeup, Clock::now())) < 0 && errno != EINTR)
      throw Error(fmt::format("poll failed: {}", std::strerror(errno)));
    if (fds[0].revents & POLLIN) on_signal();
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) read_stream(*polled[i - 1]);
    check_started();
    on_deadlines();
    if (elastic_ && !first_failure_code_ && !interrupted_by_) poll_elastic();
    if (!any_running()) deadlines_.arm_once(Deadline::kDrain, Clock::now() + kDrainGrace);
  }
  for (auto& w : workers_)
    for (auto& s : w.streams)
      if (s.fd >= 0) {
        s.relay.finish();
        ::close(s.fd);
        s.fd = -1;
      }
}

int Supervisor::exit_status() const {
  if (first_failure_code_) return *first_failure_code_;
  if (interrupted_by_) return 128 + interrupted_by_;
  return 0;
}

}  // namespace lockstep::launcher
