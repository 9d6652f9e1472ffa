#include "tools/sweep/sweep.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "tools/common/process.h"
#include "tools/sweep/asha.h"
#include "tools/sweep/command.h"
#include "tools/sweep/journal.h"
#include "tools/sweep/output.h"
#include "tools/sweep/tensorboard.h"
#include "tools/sweep/trial.h"

namespace lockstep::sweep {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kPollPeriod = std::chrono::milliseconds(200);
constexpr auto kKillGrace = std::chrono::seconds(5);     // SIGTERM -> SIGKILL
constexpr auto kBudgetGrace = std::chrono::seconds(10);  // last epoch -> stopped

// The fields a resumed sweep must share with the journal's (not --trials,
// which may grow, nor placement, which may change between starts).
nlohmann::json identity(const SweepOptions& o, const Space& space) {
  return {{"space", space.to_json()},
          {"command", o.command},
          {"scheduler", o.scheduler},
          {"sampler", o.sampler},
          {"metric", o.metric},
          {"mode", o.mode},
          {"np", o.np},
          {"budget_epochs", o.budget_epochs},
          {"min_epochs", o.min_epochs},
          {"eta", o.eta},
          {"grid_points", o.grid_points},
          {"seed", o.seed}};
}

class Sweep {
 public:
  explicit Sweep(const SweepOptions& o)
      : o_(o),
        space_(Space::load(o.space_path)),
        mode_(o.mode == "min" ? Mode::kMin : Mode::kMax),
        pool_(hosts_of(o), o.oversubscribe) {
    validate();
    if (o_.scheduler == "asha") asha_.emplace(o_.min_epochs, o_.eta, o_.budget_epochs, mode_);
  }

  int run() {
    fs::create_directories(fs::path(o_.dir) / "trials");
    journal_.emplace((fs::path(o_.dir) / "journal.jsonl").string());
    make_trials();
    replay();
    write_run_json();
    events_.emplace(o_.dir, space_, o_.metric, describe());
    tools::catch_stop_signals(/*hangup=*/true);
    print_intro();
    while (!tools::stop_requested()) {
      for (auto& t : trials_)
        if (t.status == Status::kRunning) poll(t);
      launch_pending();
      out_.progress(trials_, o_, best());
      if (std::none_of(trials_.begin(), trials_.end(),
                       [](const Trial& t) { return !ended(t.status); }))
        break;
      std::this_thread::sleep_for(kPollPeriod);
    }
    if (tools::stop_requested()) return interrupt();
    out_.finish_progress();
    out_.table(trials_, o_, space_, mode_);
    write_results();
    return 0;
  }

 private:
  static std::vector<HostSlots> hosts_of(const SweepOptions& o) {
    return o.hosts.empty() ? std::vector<HostSlots>{local_slots(o.slots)} : parse_hosts(o.hosts);
  }

  void validate() {
    if (o_.dir.empty())
      throw InvalidArgument("--dir RUN_DIR is required (the journal lives there)");
    if (o_.command.empty()) throw InvalidArgument("no trial command: put it after --");
    if (o_.np < 1) throw InvalidArgument(fmt::format("-np {}: must be at least 1", o_.np));
    if (o_.mode != "max" && o_.mode != "min")
      throw InvalidArgument(fmt::format("--mode {}: use max or min", o_.mode));
    if (o_.scheduler == "asha" && o_.budget_epochs < 1)
      throw InvalidArgument(
          "--scheduler asha needs --budget-epochs E (the most epochs a trial runs)");
    if (o_.sampler.empty()) o_.sampler = o_.scheduler == "grid" ? "grid" : "random";
    if (o_.scheduler == "grid" && o_.sampler != "grid")
      throw InvalidArgument("--scheduler grid samples the grid; drop --sampler random");
    if (o_.sampler == "random" && o_.trials < 1)
      throw InvalidArgument(fmt::format("--trials {}: give how many trials to run", o_.trials));
    std::vector<std::string> known{"metrics", "dir", "trial"};
    if (o_.budget_epochs > 0) known.push_back("epochs");
    for (const auto& p : space_.params()) known.push_back(p.name);
    check_template(o_.command, known);
    if (!o_.oversubscribe && o_.np > pool_.largest_host())
      throw InvalidArgument(fmt::format(
          "-np {} does not fit: the largest host has {} slot(s) (--slots/-H); lower -np or pass "
          "--oversubscribe",
          o_.np, pool_.largest_host()));
    concurrent_ = o_.concurrent == "auto" ? std::max(1, pool_.total() / o_.np) : parse_k();
    if (!o_.oversubscribe && concurrent_ * o_.np > pool_.total())
      throw InvalidArgument(fmt::format(
          "--concurrent {} x -np {} needs {} slots but there are {} (--slots/-H); lower "
          "--concurrent or pass --oversubscribe",
          concurrent_, o_.np, concurrent_ * o_.np, pool_.total()));
  }

  int parse_k() const {
    try {
      size_t used = 0;
      const int k = std::stoi(o_.concurrent, &used);
      if (used == o_.concurrent.size() && k >= 1) return k;
    } catch (const std::exception&) {
    }
    throw InvalidArgument(
        fmt::format("--concurrent {}: use a positive integer or auto", o_.concurrent));
  }

  void make_trials() {
    std::vector<Config> configs;
    if (o_.sampler == "grid") {
      configs = space_.grid(o_.grid_points);
      if (o_.trials > 0 && o_.trials < static_cast<int>(configs.size())) configs.resize(o_.trials);
    } else {
      for (int i = 0; i < o_.trials; ++i) {
        std::mt19937_64 rng(o_.seed * 1000003 + static_cast<uint64_t>(i));  // trial i, any order
        configs.push_back(space_.sample(rng));
      }
    }
    for (size_t i = 0; i < configs.size(); ++i) {
      Trial t;
      t.id = static_cast<int>(i);
      t.params = configs[i];
      t.dir = (fs::path(o_.dir) / "trials" / fmt::format("{:03}", i)).string();
      t.metrics_path = t.dir + "/metrics.jsonl";
      t.log_path = t.dir + "/log.txt";
      trials_.push_back(std::move(t));
    }
  }

  Trial* find(int id) {
    return id >= 0 && id < static_cast<int>(trials_.size()) ? &trials_[static_cast<size_t>(id)]
                                                            : nullptr;
  }

  // Ended trials keep their result (Note [Sweep loop]), interrupted ones are
  // pending again (attempt counts on); ASHA's rungs get back the records of
  // ended trials only, since an interrupted trial reports its rungs again.
  void replay() {
    const auto& events = journal_->events();
    const auto id = identity(o_, space_);
    if (events.empty()) {
      auto header = id;
      header["event"] = "sweep";
      header["trials"] = trials_.size();
      journal_->append(header);
      return;
    }
    check_identity(events.front(), id);
    std::map<std::pair<int, int>, std::vector<nlohmann::json>> rungs;  // (trial, attempt)
    for (const auto& e : events) {
      const std::string kind = e.value("event", "");
      Trial* t = find(e.value("trial", -1));
      if (kind == "sweep" || !t) continue;
      if (kind == "trial") t->params = e.at("params");
      if (kind == "start") t->attempt = std::max(t->attempt, e.value("attempt", 0));
      if (kind == "rung") rungs[{t->id, e.value("attempt", 0)}].push_back(e);
      if (kind == "end") restore_end(*t, e, rungs[{t->id, e.value("attempt", 0)}]);
    }
    int kept = 0, again = 0;
    for (const auto& t : trials_)
      kept += ended(t.status), again += (!ended(t.status) && t.attempt > 0);
    fmt::print(stderr,
               "lockstep sweep: resuming {}: {} trial(s) ended and kept, {} interrupted "
               "and restarted\n",
               o_.dir, kept, again);
  }

  void check_identity(const nlohmann::json& header, const nlohmann::json& id) const {
    if (header.value("event", "") != "sweep")
      throw Error(fmt::format("{} does not start with a sweep header; not a sweep journal",
                              journal_->path()));
    for (auto it = id.begin(); it != id.end(); ++it)
      if (!header.contains(it.key()) || header[it.key()] != it.value())
        throw InvalidArgument(fmt::format(
            "--dir {} holds a sweep with a different {} ({} there, {} now); resume with the same "
            "arguments or use another --dir",
            o_.dir, it.key(), header.contains(it.key()) ? header[it.key()].dump() : "none",
            it.value().dump()));
  }

  void restore_end(Trial& t, const nlohmann::json& e, const std::vector<nlohmann::json>& rungs) {
    t.status = parse_status(e.at("status").get<std::string>());
    t.reason = e.value("reason", "");
    t.epochs = e.value("epochs", 0);
    t.seconds = e.value("seconds", 0.0);
    if (e.contains("values") && e["values"].is_array())
      for (const auto& v : e["values"])
        t.values.push_back(v.is_number() ? v.get<double>() : std::nan(""));
    if (asha_)
      for (const auto& r : rungs)
        asha_->restore(t.id, r.at("rung").get<int>(), r.at("value").get<double>());
  }

  void write_run_json() const {
    nlohmann::json run = identity(o_, space_);
    run["kind"] = "sweep";
    run["concurrent"] = concurrent_;
    run["trials"] = trials_.size();
    run["rungs"] = asha_ ? asha_->rungs() : std::vector<int>{};
    std::ofstream(fs::path(o_.dir) / "run.json") << run.dump(2) << "\n";
  }

  // The HParams experiment's description (markdown).
  std::string describe() const {
    return fmt::format("`lockstep sweep`: {} {} ({}), {} scheduler, {} sampler\n\n    {}",
                       o_.metric, o_.mode, "sweep/" + o_.metric, o_.scheduler, o_.sampler,
                       fmt::join(o_.command, " "));
  }

  void print_intro() const {
    fmt::print(stderr,
               "lockstep sweep: {} trial(s), {} scheduler, {} at a time x {} worker(s); "
               "{} {}; journal {}\n",
               trials_.size(), o_.scheduler, concurrent_, o_.np, o_.mode, o_.metric,
               journal_->path());
    if (asha_)
      fmt::print(stderr, "lockstep sweep: ASHA rungs at epoch(s) {} of {}, keeping the top 1/{}\n",
                 fmt::join(asha_->rungs(), ", "), o_.budget_epochs, o_.eta);
  }

  int running() const {
    return static_cast<int>(std::count_if(trials_.begin(), trials_.end(), [](const Trial& t) {
      return t.status == Status::kRunning;
    }));
  }

  void launch_pending() {
    for (auto& t : trials_) {
      if (running() >= concurrent_) return;
      if (t.status != Status::kPending) continue;
      Placement p = pool_.acquire(o_.np);
      if (p.host_index < 0) return;
      launch(t, p);
    }
  }

  void launch(Trial& t, const Placement& p) {
    fs::create_directories(t.dir);
    ++t.attempt;
    if (t.attempt > 1 && fs::exists(t.metrics_path))
      fs::rename(t.metrics_path, fmt::format("{}/metrics.attempt-{}.jsonl", t.dir, t.attempt - 1));
    Substitutions values{{"metrics", t.metrics_path},
                         {"dir", t.dir},
                         {"trial", std::to_string(t.id)},
                         {"epochs", std::to_string(o_.budget_epochs)}};
    for (auto it = t.params.begin(); it != t.params.end(); ++it)
      values[it.key()] = format_value(it.value());
    std::vector<std::string> argv{o_.lockstep_bin, "run", "-np", std::to_string(o_.np)};
    if (!p.host.empty()) {
      argv.insert(argv.end(), {"-H", fmt::format("{}:{}", p.host, o_.np)});
      if (!o_.remote_exec.empty()) argv.insert(argv.end(), {"--remote-exec", o_.remote_exec});
    }
    argv.insert(argv.end(), o_.run_args.begin(), o_.run_args.end());
    argv.push_back("--");
    for (auto& a : substitute(o_.command, values)) argv.push_back(std::move(a));
    if (t.attempt == 1)
      journal_->append({{"event", "trial"}, {"trial", t.id}, {"params", t.params}});
    journal_->append({{"event", "start"},
                      {"trial", t.id},
                      {"attempt", t.attempt},
                      {"host", p.host},
                      {"cpus", p.cpus},
                      {"argv", argv},
                      {"log", t.log_path}});
    std::ofstream(t.log_path, std::ios::app) << fmt::format(
        "# lockstep sweep: trial {} attempt {}: {}\n", t.id, t.attempt, fmt::join(argv, " "));
    t.values.clear();
    t.epochs = 0;
    t.metrics_offset = 0;
    t.partial_line.clear();
    t.lines_read = 0;
    t.stopping = t.killed = false;
    t.budget_reached.reset();
    t.placement = p;
    t.started = Clock::now();
    t.status = Status::kRunning;
    events_->started(t);
    t.process = std::make_unique<tools::ChildProcess>(tools::ChildSpec{
        .argv = argv,
        .env = {{"LOCKSTEP_SWEEP_TRIAL", std::to_string(t.id)}, {"LOCKSTEP_SWEEP_DIR", o_.dir}},
        .log_path = t.log_path,
        .append_log = true,
        .cpus = p.cpus,
        .dies_with_parent = true});
  }

  void poll(Trial& t) {
    read_metrics(t);
    const auto now = Clock::now();
    if (auto status = t.process->poll()) {
      read_metrics(t);  // lines written just before the exit
      on_exit(t, *status);
      return;
    }
    const double elapsed = std::chrono::duration<double>(now - t.started).count();
    if (!t.stopping && o_.trial_timeout > 0 && elapsed > o_.trial_timeout)
      request_stop(t, Status::kTimeout,
                   fmt::format("still running after {:.0f} s (--trial-timeout {:g}); killed",
                               elapsed, o_.trial_timeout));
    if (!t.stopping && t.budget_reached && now - *t.budget_reached > kBudgetGrace)
      request_stop(
          t, Status::kCompleted,
          fmt::format("reached --budget-epochs {}; stopped as it did not exit", o_.budget_epochs));
    if (t.stopping && !t.killed && now - t.stop_sent > kKillGrace) {
      t.process->signal_group(SIGKILL);
      t.killed = true;
    }
  }

  void on_exit(Trial& t, int wait_status) {
    if (t.stopping) return finish(t, t.stop_as, t.reason);
    if (t.budget_reached) return finish(t, Status::kCompleted, "");
    const bool clean = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
    if (clean && t.epochs > 0) return finish(t, Status::kCompleted, "");
    if (clean)
      return finish(t, Status::kFailed,
                    fmt::format("exited 0 without writing a '{}' line to {} (is {{metrics}} passed "
                                "to the program? docs/sweep.md#metrics)",
                                o_.metric, t.metrics_path));
    finish(t, Status::kFailed,
           fmt::format("{}; last lines of {}:\n{}", tools::describe_status(wait_status), t.log_path,
                       tools::tail_of(t.log_path, 5)));
  }

  void read_metrics(Trial& t) {
    std::ifstream in(t.metrics_path, std::ios::binary);
    if (!in) return;
    in.seekg(static_cast<std::streamoff>(t.metrics_offset));
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    t.metrics_offset += chunk.size();
    t.partial_line += chunk;
    size_t nl;
    while ((nl = t.partial_line.find('\n')) != std::string::npos) {
      const std::string line = t.partial_line.substr(0, nl);
      t.partial_line.erase(0, nl + 1);
      ++t.lines_read;
      if (!line.empty() && !t.stopping) on_line(t, line);
    }
  }

  void on_line(Trial& t, const std::string& text) {
    auto line = nlohmann::json::parse(text, nullptr, false);
    if (!line.is_object())
      return request_stop(t, Status::kFailed,
                          fmt::format("line {} of {} is not a JSON object: {}", t.lines_read,
                                      t.metrics_path, text.substr(0, 80)));
    // Per-step rows (the main job's --log-every) are for plots, not for ranking.
    if (line.contains("kind") && line["kind"] == "step") return;
    if (!line.contains(o_.metric) || !line[o_.metric].is_number()) {
      std::string keys;
      for (auto it = line.begin(); it != line.end(); ++it)
        keys += (keys.empty() ? "" : ", ") + it.key();
      return request_stop(t, Status::kFailed,
                          fmt::format("line {} of {} has no number '{}' (it has: {}); choose one "
                                      "with --metric",
                                      t.lines_read, t.metrics_path, o_.metric, keys));
    }
    const int epoch = line.contains("epoch") && line["epoch"].is_number_integer()
                          ? line["epoch"].get<int>()
                          : t.epochs + 1;
    if (epoch <= t.epochs) return;  // a repeated epoch (the program resumed): first one counts
    double value = line[o_.metric].get<double>();
    t.epochs = epoch;
    t.values.resize(static_cast<size_t>(epoch), std::nan(""));
    t.values.back() = value;
    events_->reported(t, epoch, value);
    if (!std::isfinite(value)) value = mode_ == Mode::kMax ? -HUGE_VAL : HUGE_VAL;  // worst
    judge_rung(t, epoch, value);
    if (o_.budget_epochs > 0 && epoch >= o_.budget_epochs && !t.budget_reached)
      t.budget_reached = Clock::now();
  }

  void judge_rung(Trial& t, int epoch, double value) {
    if (!asha_) return;
    const RungDecision d = asha_->report(t.id, epoch, value);
    if (d == RungDecision::kNotARung) return;
    const int rung = asha_->rung_of(epoch);
    const auto n = asha_->records(rung).size();
    journal_->append({{"event", "rung"},
                      {"trial", t.id},
                      {"attempt", t.attempt},
                      {"rung", rung},
                      {"epoch", epoch},
                      {"value", value},
                      {"of", n},
                      {"decision", d == RungDecision::kStop ? "stop" : "continue"}});
    if (d == RungDecision::kStop)
      request_stop(t, Status::kStopped,
                   fmt::format("ASHA rung {} (epoch {}): {} {:.4g} is not in the top 1/{} of the "
                               "{} trial(s) there",
                               rung, epoch, o_.metric, value, o_.eta, n));
  }

  void request_stop(Trial& t, Status as, std::string reason) {
    if (t.stopping) return;
    t.stopping = true;
    t.stop_as = as;
    t.reason = std::move(reason);
    t.stop_sent = Clock::now();
    t.process->signal_group(SIGTERM);
  }

  void finish(Trial& t, Status status, std::string reason) {
    t.seconds = std::chrono::duration<double>(Clock::now() - t.started).count();
    t.status = status;
    t.reason = std::move(reason);
    t.process.reset();
    pool_.release(t.placement);
    nlohmann::json values = nlohmann::json::array();
    for (double v : t.values)
      values.push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json());
    journal_->append(
        {{"event", "end"},
         {"trial", t.id},
         {"attempt", t.attempt},
         {"status", status_name(status)},
         {"reason", t.reason},
         {"value", std::isfinite(t.value()) ? nlohmann::json(t.value()) : nlohmann::json()},
         {"values", values},
         {"epochs", t.epochs},
         {"seconds", t.seconds},
         {"log", t.log_path}});
    out_.trial_ended(t, o_);
    events_->ended(t);
  }

  const Trial* best() const {
    const Trial* b = nullptr;
    for (const auto& t : trials_)
      if (counts_for_best(t.status) && std::isfinite(t.value()) &&
          (!b || (mode_ == Mode::kMax ? t.value() > b->value() : t.value() < b->value())))
        b = &t;
    return b;
  }

  int interrupt() {
    out_.finish_progress();
    int n = 0;
    for (auto& t : trials_)
      if (t.status == Status::kRunning) t.process->signal_group(SIGTERM), ++n;
    const auto deadline = Clock::now() + kKillGrace;
    while (Clock::now() < deadline && std::any_of(trials_.begin(), trials_.end(), [](Trial& t) {
             return t.status == Status::kRunning && !t.process->poll();
           }))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (auto& t : trials_) t.process.reset();  // SIGKILLs what is left
    fmt::print(stderr,
               "lockstep sweep: interrupted; {} running trial(s) stopped and not recorded. "
               "Run the same command again to resume: ended trials are kept.\n",
               n);
    return 130;
  }

  void write_results() const {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& t : trials_)
      all.push_back(
          {{"trial", t.id},
           {"status", status_name(t.status)},
           {"params", t.params},
           {"value", std::isfinite(t.value()) ? nlohmann::json(t.value()) : nlohmann::json()},
           {"epochs", t.epochs},
           {"seconds", t.seconds},
           {"attempts", t.attempt},
           {"reason", t.reason},
           {"dir", t.dir}});
    nlohmann::json results = {{"metric", o_.metric}, {"mode", o_.mode}, {"trials", all}};
    if (const Trial* b = best())
      results["best"] = {{"trial", b->id}, {"params", b->params}, {"value", b->value()}};
    std::ofstream(fs::path(o_.dir) / "results.json") << results.dump(2) << "\n";
  }

  SweepOptions o_;
  Space space_;
  Mode mode_;
  SlotPool pool_;
  int concurrent_ = 1;
  std::optional<Asha> asha_;
  std::optional<Journal> journal_;
  std::optional<SweepEvents> events_;  // TensorBoard: the HParams experiment and sessions
  std::vector<Trial> trials_;
  Output out_;
};

}  // namespace

int run_sweep(const SweepOptions& options) {
  Sweep sweep(options);
  return sweep.run();
}

}  // namespace lockstep::sweep
