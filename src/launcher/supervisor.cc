// Supervises the workers with one poll loop over a signalfd (SIGCHLD and the
// signals to forward) and the workers' output pipes.
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

#include "launcher/failure_note.h"
#include "launcher/hosts.h"
#include "launcher/job.h"
#include "launcher/output_relay.h"
#include "launcher/remote.h"
#include "launcher/spawn.h"
#include "launcher/spec.h"
#include "lockstep/base/error.h"
#include "lockstep/base/terminate.h"
#include "lockstep/rendezvous/store.h"

extern char** environ;

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
// Elastic: failures this close together re-form the job once.
constexpr auto kReformDebounce = std::chrono::milliseconds(300);

template <typename... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  std::string line = "lockstep run: " + fmt::format(format, std::forward<Args>(args)...) + "\n";
  write_fully(STDERR_FILENO, line);
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

struct Stream {
  int fd = -1;
  OutputRelay relay;
  bool watch_failures = false;  // stderr: the terminate handler's line
  FailureNoteScanner failures;
};

struct Worker {
  int index = 0;  // stable: output prefix, elastic worker id "w<index>"
  int rank = 0;   // in the current generation (elastic jobs re-rank survivors)
  Placement where;
  pid_t pid = -1;
  bool running = false;
  bool started = true;  // remote: checked in with the store
  bool removing = false;  // elastic: left out by discovery; its exit is not a failure
  int wait_status = 0;
  int launch_fd = -1;   // remote: write end of the shim's stdin, open while it runs
  std::vector<Stream> streams;  // stdout, stderr
};

// Only multi-host jobs name hosts in messages.
std::string rank_label(const Worker& w, bool multi_host) {
  return multi_host ? fmt::format("rank {} on host {}", w.rank, w.where.host)
                    : fmt::format("rank {}", w.rank);
}

std::string elastic_id(int index) { return fmt::format("w{}", index); }

std::vector<std::string> launcher_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  return env;
}

std::string self_executable() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) throw Error("cannot read /proc/self/exe to start remote workers");
  return std::string(path, static_cast<size_t>(n));
}

class Supervisor {
 public:
  Supervisor(const LaunchSpec& spec, std::vector<Placement> placements, JobIdentity job,
             int signal_fd)
      : spec_(spec), placements_(std::move(placements)), job_(std::move(job)),
        signal_fd_(signal_fd) {
    for (const auto& p : placements_) multi_host_ |= p.cross_size > 1 || !p.local;
  }
  ~Supervisor();
  void start(const std::string& path);
  void run();
  int exit_status() const;

 private:
  void spawn(int index, const Placement& where, int null_fd);
  std::vector<std::pair<std::string, std::string>> environment_of(const Worker& w) const;
  // Elastic mode (elastic.h): publish generations, survive failures, scale up.
  void start_elastic();
  void on_elastic_failure(Worker& w, const std::string& how);
  void reform();
  void stop_elastic_job(const std::string& reason, int code);
  void publish_generation(const std::vector<ElasticMember>& newcomers);
  void scale_up();
  bool scale_down(const std::vector<HostSlots>& discovered);
  SpawnedWorker spawn_remote(Worker& w);
  void check_started();
  void close_launch_fd(Worker& w);
  void on_signal();
  void reap();
  void on_exit(Worker& w);
  void signal_all(int sig);
  void on_deadlines();
  void read_stream(Stream& s);
  std::string failure_note(Worker& w);
  bool any_running() const;
  bool any_stream_open() const;

  const LaunchSpec& spec_;
  std::vector<Placement> placements_;
  bool multi_host_ = false;
  JobIdentity job_;
  std::optional<rendezvous::StoreClient> store_client_;  // set when remote ranks must check in
  std::optional<Clock::time_point> start_deadline_, next_start_check_;
  int signal_fd_;
  std::vector<Worker> workers_;
  std::optional<int> first_failure_code_;
  int interrupted_by_ = 0;
  std::optional<Clock::time_point> term_at_;
  std::optional<Clock::time_point> kill_at_;
  std::optional<Clock::time_point> drain_until_;
  std::string path_;
  std::optional<ElasticController> elastic_;
  std::optional<Clock::time_point> reform_at_;
  int last_failure_code_ = 1;
};

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

void Supervisor::start(const std::string& path) {
  path_ = path;
  if (spec_.elastic.enabled()) start_elastic();
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  workers_.reserve(spec_.num_proc);
  for (int rank = 0; rank < spec_.num_proc && !interrupted_by_ && !first_failure_code_; ++rank)
    spawn(rank, placements_[rank], null_fd);
  if (null_fd >= 0) ::close(null_fd);
  bool any_remote = std::any_of(workers_.begin(), workers_.end(),
                                [](const Worker& w) { return !w.started; });
  if (any_remote) {
    rendezvous::StoreClient::Options options;
    options.connect_timeout = std::chrono::seconds(10);
    if (!store_client_)
      store_client_.emplace(job_.rendezvous, rendezvous::decode_secret_hex(job_.secret_hex),
                            options);
    start_deadline_ = Clock::now() + spec_.start_timeout;
    next_start_check_ = Clock::now();
  }
}

SpawnedWorker Supervisor::spawn_remote(Worker& w) {
  std::vector<std::string> argv = remote_command(spec_.remote_exec, w.where.host, self_executable());
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
    throw Error(fmt::format("cannot create a pipe for rank {}: {}", w.rank,
                            std::strerror(errno)));
  SpawnedWorker child;
  try {
    // The remote-exec command itself gets the launcher's environment: the
    // job's identity and secret travel only in the launch block.
    child = spawn_worker(ExecImage(exec_path, argv, launcher_environment()),
                         launch[0], w.index);
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

// The worker's identity in its first generation: an elastic worker's rank
// comes from the generation the launcher last published.
std::vector<std::pair<std::string, std::string>> Supervisor::environment_of(const Worker& w) const {
  auto env = worker_environment(spec_, job_, w.rank, w.where);
  if (!elastic_) return env;
  std::map<std::string, std::string> map(env.begin(), env.end());
  const std::string id = elastic_id(w.index);
  if (auto a = elastic_->assignment_of(id)) {
    map["LOCKSTEP_RANK"] = std::to_string(a->rank);
    map["LOCKSTEP_SIZE"] = std::to_string(a->size);
    map["LOCKSTEP_LOCAL_RANK"] = std::to_string(a->local_rank);
    map["LOCKSTEP_LOCAL_SIZE"] = std::to_string(a->local_size);
    map["LOCKSTEP_CROSS_RANK"] = std::to_string(a->cross_rank);
    map["LOCKSTEP_CROSS_SIZE"] = std::to_string(a->cross_size);
  }
  map["LOCKSTEP_ELASTIC"] = "1";
  map["LOCKSTEP_WORKER_ID"] = id;
  map["LOCKSTEP_ELASTIC_GENERATION"] = std::to_string(elastic_->generation());
  return {map.begin(), map.end()};
}

void Supervisor::spawn(int index, const Placement& where, int null_fd) {
  Worker w;
  w.index = index;
  w.rank = index;
  w.where = where;
  if (elastic_)
    if (auto a = elastic_->assignment_of(elastic_id(index))) w.rank = a->rank;
  SpawnedWorker child =
      w.where.local
          ? spawn_worker(ExecImage(path_, spec_.program, as_env_strings(environment_of(w))),
                         null_fd, index)
          : spawn_remote(w);
  w.pid = child.pid;
  w.running = true;
  w.streams.push_back({child.stdout_fd, OutputRelay(STDOUT_FILENO, index, spec_.prefix_output),
                       false, {}});
  w.streams.push_back({child.stderr_fd, OutputRelay(STDERR_FILENO, index, spec_.prefix_output),
                       true, {}});
  workers_.push_back(std::move(w));
  if (spec_.verbose) say("{} started as pid {}", rank_label(workers_.back(), multi_host_), child.pid);
}

// Remote ranks prove they reached the store; at --start-timeout the hosts
// that have not are named and the job is stopped.
void Supervisor::check_started() {
  if (!start_deadline_ || Clock::now() < *next_start_check_) return;
  std::vector<Worker*> pending;
  for (auto& w : workers_)
    if (!w.started && w.running) pending.push_back(&w);
  for (auto* w : pending) {
    std::string key = started_key(w->index);
    w->started = store_client_->check(std::span<const std::string>(&key, 1));
  }
  std::erase_if(pending, [](Worker* w) { return w->started; });
  if (pending.empty() || first_failure_code_ || interrupted_by_) {
    start_deadline_.reset();
    return;
  }
  next_start_check_ = Clock::now() + std::chrono::milliseconds(200);
  if (Clock::now() < *start_deadline_) return;
  std::map<std::string, std::vector<int>> by_host;
  for (auto* w : pending) by_host[w->where.host].push_back(w->rank);
  std::string missing;
  for (const auto& [host, ranks] : by_host)
    missing += fmt::format("{}{} (ranks {})", missing.empty() ? "" : ", ", host,
                           fmt::join(ranks, ","));
  say("host(s) {} did not start and reach the rendezvous store at {} within {} s "
      "(--start-timeout); check the remote-exec command ('{}'), that lockstep is installed at the "
      "same path there, and that those hosts can reach this address; stopping the job",
      missing, job_.rendezvous, spec_.start_timeout.count(), spec_.remote_exec);
  start_deadline_.reset();
  first_failure_code_ = 1;
  term_at_ = Clock::now();
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
      if (!kill_at_) kill_at_ = Clock::now() + kTermGrace;
    } else {
      say("received {} again; killing the workers", signal_name(sig));
      signal_all(SIGKILL);
    }
  }
}

void Supervisor::reap() {
  for (auto& w : workers_) {
    if (!w.running) continue;
    int status = 0;
    pid_t r = ::waitpid(w.pid, &status, WNOHANG);
    if (r == w.pid) {
      w.running = false;
      w.wait_status = status;
      on_exit(w);
    }
  }
}

void Supervisor::on_exit(Worker& w) {
  int status = w.wait_status;
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::string how = WIFEXITED(status)
                        ? fmt::format("exited with code {}", WEXITSTATUS(status))
                        : fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                                      signal_name(WTERMSIG(status)));
  if (std::string note = failure_note(w); !note.empty())
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
  bool first_failure = !ok && !interrupted_by_ && !first_failure_code_;
  if (first_failure && elastic_) return on_elastic_failure(w, how);
  if (!first_failure) {
    if (spec_.verbose) say("{} (pid {}) {}", who, w.pid, how);
    return;
  }
  first_failure_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  say("{} (pid {}) {}; stopping the other workers{}", who, w.pid, how,
      multi_host_ ? " on every host" : "");
  term_at_ = Clock::now() + kPeerGrace;
}

// ---- elastic mode

void Supervisor::start_elastic() {
  rendezvous::StoreClient::Options options;
  options.connect_timeout = std::chrono::seconds(10);
  store_client_.emplace(job_.rendezvous, rendezvous::decode_secret_hex(job_.secret_hex), options);
  elastic_.emplace(spec_.elastic);
  std::vector<ElasticMember> members;
  for (int i = 0; i < spec_.num_proc; ++i)
    members.push_back({elastic_id(i), placements_[i].host, i});
  elastic_->publish(*store_client_, members);
}

// A lost worker. Re-forming waits kReformDebounce so that workers dying
// together (a whole host) cost one re-formation, and no generation names a
// worker that is already dead but not yet reaped.
void Supervisor::on_elastic_failure(Worker& w, const std::string& how) {
  say("{} (pid {}) {}", rank_label(w, multi_host_), w.pid, how);
  if (elastic_->record_failure(w.where.host))
    say("host {} failed {} times; leaving it out for {} s", w.where.host,
        spec_.elastic.host_failure_limit, spec_.elastic.cooldown.count());
  last_failure_code_ =
      WIFEXITED(w.wait_status) ? WEXITSTATUS(w.wait_status) : 128 + WTERMSIG(w.wait_status);
  if (!reform_at_) reform_at_ = Clock::now() + kReformDebounce;
}

// Re-form with the survivors, unless that breaks a limit.
void Supervisor::reform() {
  reform_at_.reset();
  int survivors = 0;
  for (const auto& other : workers_) survivors += other.running && !other.removing;
  const int limit = spec_.elastic.reset_limit;
  if (limit >= 0 && elastic_->reformations() >= limit)
    return stop_elastic_job(
        fmt::format("the job already re-formed {} time(s), the --reset-limit; stopping", limit),
        last_failure_code_);
  if (survivors < spec_.elastic.min_np)
    return stop_elastic_job(fmt::format("{} worker(s) left, fewer than --min-np {}; stopping",
                                        survivors, spec_.elastic.min_np),
                            last_failure_code_);
  elastic_->count_reformation();
  say("re-forming the job with the {} remaining worker(s)", survivors);
  publish_generation({});
}

void Supervisor::stop_elastic_job(const std::string& reason, int code) {
  say("{}", reason);
  try {
    elastic_->fail(*store_client_, reason);
  } catch (const std::exception& e) {
    say("could not tell the workers why: {}", e.what());
  }
  first_failure_code_ = code == 0 ? 1 : code;
  term_at_ = Clock::now() + kPeerGrace;
}

// Discovery no longer offers room for some workers (a host left the list):
// publish a generation without them; they leave at the next commit, and
// their exit is not counted as a failure. Additions wait for the next round.
bool Supervisor::scale_down(const std::vector<HostSlots>& discovered) {
  std::vector<Worker*> running;
  for (auto& w : workers_)
    if (w.running && !w.removing) running.push_back(&w);
  std::sort(running.begin(), running.end(),
            [](const Worker* a, const Worker* b) { return a->rank < b->rank; });
  std::vector<std::pair<int, std::string>> by_rank;
  for (const Worker* w : running) by_rank.emplace_back(w->index, w->where.host);
  auto leaving = workers_to_remove(discovered, by_rank);
  if (leaving.empty()) return false;
  const int staying = static_cast<int>(running.size() - leaving.size());
  if (staying < spec_.elastic.min_np) {
    say("the discovery script offers room for only {} of the {} running worker(s); keeping them "
        "all (--min-np {})", staying, running.size(), spec_.elastic.min_np);
    return false;
  }
  std::vector<std::string> who;
  for (auto& w : workers_)
    if (std::find(leaving.begin(), leaving.end(), w.index) != leaving.end()) {
      w.removing = true;
      who.push_back(fmt::format("{} on {}", elastic_id(w.index), w.where.host));
    }
  say("the discovery script no longer offers room for {}; removing them at the next commit",
      fmt::join(who, ", "));
  elastic_->count_reformation();
  publish_generation({});
  return true;
}

// The running workers (survivors keep their order) plus `newcomers`, which
// the caller starts afterwards.
void Supervisor::publish_generation(const std::vector<ElasticMember>& newcomers) {
  std::vector<ElasticMember> members;
  for (const auto& w : workers_)
    if (w.running && !w.removing) members.push_back({elastic_id(w.index), w.where.host, w.rank});
  members.insert(members.end(), newcomers.begin(), newcomers.end());
  const int g = elastic_->publish(*store_client_, members);
  std::vector<std::string> ranks;
  for (auto& w : workers_)
    if (auto a = elastic_->assignment_of(elastic_id(w.index))) {
      w.rank = a->rank;
      ranks.push_back(fmt::format("{}->{}", elastic_id(w.index), a->rank));
    }
  for (const auto& m : newcomers)
    ranks.push_back(fmt::format("{}->{} (new)", m.id, elastic_->assignment_of(m.id)->rank));
  say("generation {}: {} worker(s) ({})", g, members.size(), fmt::join(ranks, " "));
}

// Discovery found free slots: start workers there; they join the running
// ones at their next commit (docs/elastic.md).
void Supervisor::scale_up() {
  auto discovered = elastic_->discover();
  if (!discovered || scale_down(*discovered)) return;
  std::map<std::string, int> running_per_host;
  int running = 0;
  for (const auto& w : workers_)
    if (w.running && !w.removing) {
      ++running_per_host[w.where.host];
      ++running;
    }
  auto hosts = hosts_for_new_workers(*discovered, running_per_host, elastic_->cooling_down(),
                                     spec_.elastic.max_np - running);
  if (hosts.empty()) return;
  say("discovered {} free slot(s) ({}); starting new worker(s) that join at the next commit",
      hosts.size(), fmt::join(hosts, ","));
  // The generation names the new workers before they start.
  std::vector<ElasticMember> newcomers;
  for (const auto& host : hosts)
    newcomers.push_back({elastic_id(static_cast<int>(workers_.size() + newcomers.size())), host, {}});
  elastic_->count_reformation();
  publish_generation(newcomers);
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (const auto& m : newcomers) {
    Placement where;  // local/cross ranks come from the generation (environment_of)
    where.host = m.host;
    where.local = is_local_host(m.host);
    spawn(static_cast<int>(workers_.size()), where, null_fd);
  }
  if (null_fd >= 0) ::close(null_fd);
}

void Supervisor::on_deadlines() {
  auto now = Clock::now();
  if (term_at_ && now >= *term_at_) {
    term_at_.reset();
    if (any_running()) {
      signal_all(SIGTERM);
      if (!kill_at_) kill_at_ = now + kTermGrace;
    }
  }
  if (kill_at_ && now >= *kill_at_) {
    kill_at_.reset();
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
  while (any_running() || (any_stream_open() && drain_until_ && Clock::now() < *drain_until_)) {
    fds.assign(1, pollfd{signal_fd_, POLLIN, 0});
    polled.clear();
    for (auto& w : workers_)
      for (auto& s : w.streams)
        if (s.fd >= 0) {
          fds.push_back({s.fd, POLLIN, 0});
          polled.push_back(&s);
        }
    std::optional<Clock::time_point> deadline = kill_at_;
    if (term_at_ && (!deadline || *term_at_ < *deadline)) deadline = term_at_;
    if (drain_until_ && (!deadline || *drain_until_ < *deadline)) deadline = drain_until_;
    if (start_deadline_ && (!deadline || *next_start_check_ < *deadline)) deadline = next_start_check_;
    if (elastic_ && !first_failure_code_) {
      if (auto next = elastic_->next_discovery(); next && (!deadline || *next < *deadline))
        deadline = next;
      if (reform_at_ && (!deadline || *reform_at_ < *deadline)) deadline = reform_at_;
    }
    int timeout = -1;
    if (deadline) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      timeout = ms <= 0 ? 0 : static_cast<int>(ms) + 1;
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR)
      throw Error(fmt::format("poll failed: {}", std::strerror(errno)));
    if (fds[0].revents & POLLIN) on_signal();
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) read_stream(*polled[i - 1]);
    check_started();
    on_deadlines();
    if (elastic_ && !first_failure_code_ && !interrupted_by_) {
      if (reform_at_ && Clock::now() >= *reform_at_) reform();
      if (!reform_at_ && !first_failure_code_) scale_up();
    }
    if (!any_running() && !drain_until_) drain_until_ = Clock::now() + kDrainGrace;
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

std::vector<Placement> placements_of(const LaunchSpec& spec) {
  if (spec.through_slurm) {
    std::vector<Placement> placements = place_ranks(spec.hosts, spec.num_proc);
    for (auto& p : placements) p.local = false;  // this host's ranks go through srun too
    return placements;
  }
  if (!spec.hosts.empty()) return place_ranks(spec.hosts, spec.num_proc);
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return place_ranks({{name, spec.num_proc}}, spec.num_proc);
}

int supervise_job(const LaunchSpec& spec, const std::string& path) {
  std::vector<Placement> placements = placements_of(spec);
  // Before the rendezvous thread starts, so that thread inherits the mask
  // and never takes the signals.
  int signal_fd = block_supervision_signals();
  JobIdentity job{new_job_id(), "", rendezvous::random_secret_hex()};
  rendezvous::StoreServer::Options store_options;
  store_options.host = choose_rendezvous_host(spec.rendezvous_addr, placements);
  store_options.secret = rendezvous::decode_secret_hex(job.secret_hex);
  rendezvous::StoreServer store(std::move(store_options));
  store.start();
  job.rendezvous = store.address();
  if (spec.verbose)
    say("job {}: starting {} worker(s) of '{}'{}; rendezvous at {}", job.job_id, spec.num_proc,
        spec.program[0], spec.through_slurm ? " through srun (Slurm allocation)" : "",
        job.rendezvous);
  int status = 0;
  {
    Supervisor supervisor(spec, std::move(placements), job, signal_fd);
    try {
      supervisor.start(path);
      supervisor.run();
    } catch (...) {
      // Never leave workers behind: they die with us through PDEATHSIG anyway,
      // but shared memory does not.
      remove_job_shared_memory(job.job_id);
      throw;
    }
    status = supervisor.exit_status();
  }
  store.stop();
  int removed = remove_job_shared_memory(job.job_id);
  if (spec.verbose) {
    if (removed) say("removed {} shared-memory segment(s) left by job {}", removed, job.job_id);
    say("job {} finished with exit status {}", job.job_id, status);
  }
  ::close(signal_fd);
  return status;
}

}  // namespace

int supervise(const LaunchSpec& spec) {
  std::string path = resolve_program(spec.program[0]);
  if (path.empty()) {
    say("cannot find or execute '{}'; give a path or check PATH", spec.program[0]);
    return kProgramNotFound;
  }
  try {
    return supervise_job(spec, path);
  } catch (const ExecFailed& e) {
    say("{}", e.what());
    return e.exit_status();
  } catch (const std::exception& e) {
    std::string_view what = e.what();
    if (what.starts_with("lockstep run: ")) what.remove_prefix(14);  // say() adds it
    say("{}", what);
    return 1;
  }
}

}  // namespace lockstep::launcher
