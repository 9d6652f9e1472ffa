// `lockstep plan validate`: runs a program at several scales on this
// machine, measures its step time with lockstep's own step profiler, and
// compares it with what the planner predicts from a profile taken at np 1
// and network fits taken beforehand (docs/plan.md).
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/plan/simulator.h"
#include "lockstep/plan/validation.h"
#include "plan/commands.h"
#include "plan/job.h"
#include "plan/netns.h"
#include "plan/stats.h"  // src/plan: the planner's own median

namespace lockstep::plan_tool {
namespace {

namespace fs = std::filesystem;

struct ValidateOptions {
  std::string np = "1,2";
  int netns = 0;
  int per_host = 1;  // ranks per netns host (> 1: the hierarchical allreduce)
  std::string shapes = "1gbit,200mbit";
  std::vector<std::string> networks;  // fitted beforehand; else fitted here
  int steps = 20;
  int warmup = 5;
  int threads = 1;
  std::string workdir;
  bool json = false;
  bool quick = false;  // short fits (CI): fewer sizes, less time per size
  bool contention = true;  // calibrate the co-location slowdown at np > 1
  int rounds = 3;
  std::string wake_wait = "tick";  // tick | sweep | milliseconds (netns hosts sharing cores)
  double timeout_s = 300;
  std::vector<std::string> program;
};

// What one point measured and predicted, one entry per round.
struct PointResult {
  bool oversubscribed = false;
  // Namespace hosts whose training threads fill the cores, run with
  // overlap on: their engine threads have no core during backward, and the
  // step swings between calls with the scheduler (docs/plan.md, run 5).
  bool comm_without_core = false;
  std::string backend;
  bool overlap = false;
  std::vector<double> measured_ms, predicted_ms, measured_sync_ms, predicted_comm_ms;
  std::vector<double> slowdown;  // the co-location factor each round's prediction used
  double wake_wait_ms = 0;
};

// CONFIG_HZ of the running kernel: /proc/config.gz, else
// /boot/config-RELEASE; nullopt when neither says.
std::optional<int> kernel_hz() {
  std::string text;
  if (FILE* f = popen("gzip -dc /proc/config.gz 2>/dev/null", "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    pclose(f);
  }
  if (auto hz = plan::kernel_hz_from_config(text)) return hz;
  struct utsname u {};
  if (uname(&u) != 0) return std::nullopt;
  std::ifstream boot(std::string("/boot/config-") + u.release);
  text.assign(std::istreambuf_iterator<char>(boot), std::istreambuf_iterator<char>());
  return plan::kernel_hz_from_config(text);
}

double parse_wake_wait_ms(const std::string& text) {
  try {
    size_t used = 0;
    const double ms = std::stod(text, &used);
    if (used == text.size() && ms >= 0 && std::isfinite(ms)) return ms;
  } catch (const std::exception&) {
  }
  throw InvalidArgument(fmt::format(
      "--wake-wait {}: give tick, sweep or a wait in milliseconds (>= 0)", text));
}

int cores() { return std::max(1u, std::thread::hardware_concurrency()); }

using plan::detail::median;

// Runs the schedule (validation.h): every point's measurement right after a
// profile at np 1 (and a co-location calibration) of its own, round after
// round, so that each round's prediction comes from a profile taken seconds
// before its measurement, in the same state of this VM. Each point reports
// its per-round errors and their median.
class Validator {
 public:
  explicit Validator(const ValidateOptions& o) : o_(o) {
    dir_ = o.workdir.empty() ? make_temp_dir() : o.workdir;
    fs::create_directories(dir_);
    threshold_ = static_cast<int64_t>(
        parse_bytes(knob_string("LOCKSTEP_FUSION_THRESHOLD"), "LOCKSTEP_FUSION_THRESHOLD"));
  }

  int run() {
    if (o_.netns > 0) prepare_netns();  // bad shapes fail before any measurement
    if (!o_.networks.empty()) given_ = plan::resolve_network(o_.networks);  // so do bad networks
    nps_ = parse_int_list(o_.np, "--np");
    make_points();
    const auto schedule = plan::validation_schedule(points_, o_.rounds);
    int done = 0;
    for (const auto& run : schedule) {
      ++done;
      const std::string r = o_.rounds > 1 ? fmt::format("-r{}", run.round) : "";
      const plan::ValidationPoint* p = run.point >= 0 ? &points_[run.point] : nullptr;
      progress("[{}/{}] round {}/{}: {}{}", done, schedule.size(), run.round + 1, o_.rounds,
               plan::to_string(run.kind), p ? fmt::format(" for np {} {}", p->np, p->network) : "");
      switch (run.kind) {
        case plan::ScheduledRun::Kind::kFitShm:
          shm_network_ = network_for_shm(fmt::format("-np{}{}", p->np, r), p->np);
          break;
        case plan::ScheduledRun::Kind::kFitNetns: fit_link(shape_of(*p)); break;
        case plan::ScheduledRun::Kind::kProfile:
          profile_ = measure({"-np", "1"}, "np1" + r + "-for-" + tag_of(*p));
          if (!profile_) return 1;
          slowdown_ = 1.0;
          break;
        case plan::ScheduledRun::Kind::kCalibrate:
          slowdown_ = colocated_slowdown(*profile_, p->np, tag_of(*p) + r);
          break;
        case plan::ScheduledRun::Kind::kMeasure:
          if (p->netns()) netns_point(run.point, r); else shm_point(run.point, r);
          break;
      }
    }
    report();
    return 0;
  }


 private:
  template <typename... Args>
  void progress(fmt::format_string<Args...> f, Args&&... args) {
    fmt::print(stderr, "lockstep plan validate: {}\n", fmt::format(f, std::forward<Args>(args)...));
  }

  static std::string make_temp_dir() {
    std::string t = (fs::temp_directory_path() / "lockstep-validate-XXXXXX").string();
    if (!mkdtemp(t.data())) throw Error("cannot create a temporary directory");
    return t;
  }

  // Runs the program under `lockstep run LAUNCH...` until rank 0 wrote its
  // profile, and returns it (nullopt after printing why it failed).
  std::optional<plan::Profile> measure(const std::vector<std::string>& launch,
                                       const std::string& tag) {
    const std::string out = dir_ + "/profile-" + tag + ".json";
    JobSpec job;
    job.argv = {bin_dir() + "/lockstep", "run"};
    job.argv.insert(job.argv.end(), launch.begin(), launch.end());
    for (const std::string& kv :
         {"LOCKSTEP_PROFILE=" + out, fmt::format("LOCKSTEP_PROFILE_STEPS={}", o_.steps),
          fmt::format("LOCKSTEP_PROFILE_WARMUP={}", o_.warmup),
          fmt::format("LOCKSTEP_INTRA_OP_THREADS={}", o_.threads)}) {
      job.argv.push_back("-x");
      job.argv.push_back(kv);
    }
    job.argv.push_back("--");
    job.argv.insert(job.argv.end(), o_.program.begin(), o_.program.end());
    job.log_path = dir_ + "/run-" + tag + ".log";
    job.stop_when = out;
    job.timeout_s = o_.timeout_s;
    job.label = tag;
    JobResult r = run_job(job);
    if (!fs::exists(out)) {
      fmt::print(stderr, "lockstep plan validate: {}: no profile (exit {}{}); the program needs "
                 "at least {} steps. Last lines of {}:\n{}", tag, r.exit_code,
                 r.timed_out ? ", timed out" : "", o_.warmup + o_.steps, job.log_path,
                 tail_of(job.log_path));
      return std::nullopt;
    }
    return plan::load_profile(out);
  }

  plan::NetworkModel fit(const std::string& backend, const std::vector<std::string>& args,
                         const std::string& tag) {
    const std::string out = dir_ + "/net-" + tag + ".json";
    JobSpec job;
    job.argv = {bin_dir() + "/lockstep-bench-fit", "--backend", backend, "--out", out, "--quiet",
                "--name", "fit: " + tag};
    job.argv.insert(job.argv.end(), args.begin(), args.end());
    if (o_.quick)
      job.argv.insert(job.argv.end(), {"--seconds", "0.02", "--sizes", "4B:1MiB", "--factor", "8"});
    job.log_path = dir_ + "/fit-" + tag + ".log";
    job.timeout_s = 600;
    job.label = "fit " + tag;
    JobResult r = run_job(job);
    if (r.exit_code != 0)
      throw Error(fmt::format("the {} fit failed (exit {}); last lines of {}:\n{}", tag,
                              r.exit_code, job.log_path, tail_of(job.log_path)));
    return plan::load_network(out);
  }

  // The shared-memory costs: the given networks if they have them, else a
  // fit at `np` (0: at the validated world sizes that fit on the cores; an
  // oversubscribed sweep would measure the scheduler).
  plan::NetworkModel network_for_shm(const std::string& r, int np) {
    if (!o_.networks.empty()) {
      plan::NetworkModel m = plan::resolve_network(o_.networks);
      if (m.has("shm")) return m;
    }
    std::string list;
    for (int np : nps_)
      if (np >= 2 && np <= cores()) list += (list.empty() ? "" : ",") + std::to_string(np);
    if (list.empty()) list = "2";
    if (np > 0) list = std::to_string(np);
    progress("fitting shared memory at np {}", list);
    plan::NetworkModel m = fit("shm", {"--np", list}, "shm" + r);
    return o_.networks.empty() ? m : plan::merge(plan::resolve_network(o_.networks), m);
  }

  // Shared-memory points at np > 1 fit again next to each measurement: this
  // VM switches between states where shared memory is fast and compute
  // contended, or the reverse, and a fit from elsewhere would mix states.
  // Whatever else needs shared-memory costs (oversubscribed points, points
  // under --network, the netns hosts' intra-host stage at --per-host > 1)
  // takes the latest of those fits, or one common fit made here the first
  // time nothing has fitted yet. np 1 points communicate nothing and need
  // no network (plan::simulate), so `--np 1,2` fits only next to np 2.
  const plan::NetworkModel& shm_costs() {
    if (!shm_network_) shm_network_ = network_for_shm("", 0);
    return *shm_network_;
  }

  plan::Scenario scenario(int hosts, int per_host, const std::string& cross) const {
    plan::Scenario s;
    s.topology = {hosts, per_host, cross, knob_string("LOCKSTEP_HIERARCHICAL")};
    s.fusion_threshold = threshold_;
    s.overlap = knob_string("LOCKSTEP_OVERLAP");
    s.cores_per_node = cores();
    s.threads_per_rank = o_.threads;
    return s;
  }

  // The points in schedule order: --np on this host, then each shaped link.
  void make_points() {
    for (int np : nps_)
      points_.push_back({np, 1, np == 1 ? "none" : "shm",
                         np > 1 && o_.networks.empty() && np * o_.threads <= cores(),
                         np > 1 && o_.contention && np * o_.threads <= cores()});
    if (hosts_)
      for (const LinkShape& shape : shapes_)
        // The hosts are this machine: their ranks contend for its memory
        // bus as co-located ranks do, so they get the same calibration.
        points_.push_back({o_.netns * o_.per_host, o_.netns, "gloo " + shape.label, false,
                           o_.contention && o_.netns * o_.per_host * o_.threads <= cores()});
    results_.resize(points_.size());
    // Namespace hosts are this machine too: all ranks share its cores.
    for (size_t i = 0; i < points_.size(); ++i)
      results_[i].oversubscribed = points_[i].np * o_.threads > cores();
  }

  const LinkShape& shape_of(const plan::ValidationPoint& p) const {
    for (const auto& s : shapes_)
      if ("gloo " + s.label == p.network) return s;
    throw Error(fmt::format("no link shape for point {}", p.network));
  }

  // The measured run's file tag: np 1 "np1-again" (its error is the
  // run-to-run noise of the profile), np N "npN", netns "netnsH-SHAPE".
  std::string tag_of(const plan::ValidationPoint& p) const {
    if (p.netns()) return fmt::format("netns{}-{}", p.hosts, shape_of(p).label);
    return p.np == 1 ? "np1-again" : fmt::format("np{}", p.np);
  }

  void record(int index, const plan::Profile& measured, const plan::NetworkModel& net,
              const plan::Scenario& s) {
    const plan::ValidationPoint& p = points_[index];
    PointResult& res = results_[index];
    res.slowdown.push_back(s.colocated_slowdown);
    res.wake_wait_ms = s.wake_wait_ms;
    plan::StepPrediction pred = plan::simulate(*profile_, net, s);
    plan::ProfileSummary m = plan::summarize(measured);
    res.measured_ms.push_back(m.step_ms);
    res.measured_sync_ms.push_back(m.sync_ms);
    res.predicted_ms.push_back(pred.step_ms);
    res.predicted_comm_ms.push_back(pred.exposed_comm_ms + pred.straggler_ms);
    res.backend = pred.backend;
    res.overlap = pred.overlap;
    progress("np {} hosts {} {}: measured {:.2f} ms, predicted {:.2f} ms ({:+.1f}%)", p.np,
             p.hosts, p.network, m.step_ms, pred.step_ms,
             100 * (pred.step_ms - m.step_ms) / m.step_ms);
  }

  void shm_point(int index, const std::string& r) {
    const plan::ValidationPoint& p = points_[index];
    auto measured = measure({"-np", std::to_string(p.np)}, tag_of(p) + r);
    if (!measured) return;
    plan::Scenario s = scenario(1, p.np, "gloo");
    s.colocated_slowdown = slowdown_;
    record(index, *measured, p.np == 1 ? plan::NetworkModel{} : shm_costs(), s);
  }

  // How much slower a rank computes beside np - 1 others on this host:
  // compute (step - sync) of a separate calibration run at np over the np 1
  // profile's. Not measured where ranks outnumber cores (that would be the
  // scheduler, which the point is marked for) nor with --no-contention.
  double colocated_slowdown(const plan::Profile& profile, int np, const std::string& tag) {
    if (!o_.contention || np * o_.threads > cores()) return 1.0;
    progress("calibrating co-located compute at np {}", np);
    auto calib = measure({"-np", std::to_string(np)}, fmt::format("np{}-calib-for-{}", np, tag));
    if (!calib) return 1.0;
    const double alone = plan::summarize(profile).compute_ms;
    const double beside = plan::summarize(*calib).compute_ms;
    const double f = alone > 0 ? beside / alone : 1.0;
    progress("np {}: compute {:.2f} ms beside the others against {:.2f} ms alone: x{:.3f}", np,
             beside, alone, f);
    return f;
  }

  void prepare_netns() {
    size_t start = 0;
    for (;;) {
      size_t comma = o_.shapes.find(',', start);
      shapes_.push_back(
          parse_shape(o_.shapes.substr(start, comma == std::string::npos ? comma : comma - start)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    try {
      hosts_ = std::make_unique<NetnsHosts>(o_.netns);
    } catch (const InvalidArgument&) {
      throw;
    } catch (const Error& e) {
      progress("skipping the network-namespace points: {}", e.what());
      return;
    }
    progress("{} network-namespace hosts; netem {}", o_.netns,
             hosts_->netem_available() ? "available (latency can be shaped)"
                                       : "NOT available in this kernel: links are shaped by rate "
                                         "(tbf) only, latency is the veth's own");
    for (const auto& shape : shapes_)
      if (shape.latency_ms > 0 && !hosts_->netem_available())
        throw InvalidArgument(fmt::format(
            "--shape {}: this kernel has no netem (CONFIG_NET_SCH_NETEM), so latency cannot be "
            "added; give the rate alone (e.g. --shape {})", shape.label, shape.rate));
  }

  // The namespace hosts share this machine's cores: their training threads
  // fill them, unlike a cluster host's.
  bool hosts_share_cores() const { return o_.netns * o_.per_host * o_.threads >= cores(); }

  // W, the wait for a core of every engine operation that starts while
  // the hosts' training threads hold all cores (docs/plan.md, section 4):
  // one kernel tick by default (--wake-wait tick), the busy sweep's small
  // collectives minus the idle ones (sweep), or a given value.
  double wake_wait_ms(std::vector<std::string> fit_args, const std::string& label) {
    if (!hosts_share_cores()) return 0;
    if (o_.wake_wait == "tick") return tick_ms();
    if (o_.wake_wait != "sweep") return parse_wake_wait_ms(o_.wake_wait);
    progress("fitting Gloo over {} beside busy threads (the wait for a core)", label);
    fit_args.push_back("--busy-threads=" + std::to_string(o_.threads * o_.per_host));
    const plan::NetworkModel busy = fit("gloo", fit_args, "gloo-busy-" + label);
    auto small = [](const plan::NetworkModel& m) {
      std::vector<double> v;
      for (const auto& p : m.points)
        if (p.transport == "gloo" && p.bytes <= 4096) v.push_back(p.measured_s * 1e3);
      return median(v);
    };
    const double w = std::max(0.0, small(busy) - small(net_of_[label]));
    progress("{}: small collectives {:.3f} ms beside busy threads, {:.3f} ms idle: a wait of "
             "{:.3f} ms per engine operation during compute", label, small(busy),
             small(net_of_[label]), w);
    return w;
  }

  // One period of the kernel's scheduler tick, from its configuration.
  double tick_ms() {
    const std::optional<int> hz = kernel_hz();
    if (!hz)
      throw Error("--wake-wait tick: CONFIG_HZ is in neither /proc/config.gz nor "
                  "/boot/config-RELEASE; give --wake-wait MS or --wake-wait sweep");
    progress("the wait for a core: one scheduler tick, CONFIG_HZ={} ({:.3f} ms)", *hz, 1e3 / *hz);
    return 1e3 / *hz;
  }

  std::vector<std::string> link_launch(int slots) const {
    return {"--remote-exec", "ip netns exec {host}", "--rendezvous-addr", hosts_->launcher_ip(),
            "-H", hosts_->host_list(slots)};
  }

  // Fits Gloo over one shaped link, one rank per host: the flat ring among
  // hosts that is also the hierarchical allreduce's cross-host stage.
  void fit_link(const LinkShape& shape) {
    hosts_->shape(shape);
    std::vector<std::string> fit_args;
    for (const auto& a : link_launch(1)) fit_args.push_back("--launcher-arg=" + a);
    progress("fitting Gloo over {} hosts shaped to {}", o_.netns, shape.label);
    // One rank per host (--per-host 1) has no intra-host stage to cost.
    const plan::NetworkModel base = o_.per_host > 1 ? shm_costs() : given_;
    net_of_[shape.label] = plan::merge(base, fit("gloo", fit_args, "gloo-" + shape.label));
    wake_wait_ms_[shape.label] = wake_wait_ms(fit_args, shape.label);
  }

  void netns_point(int index, const std::string& r) {
    const LinkShape& shape = shape_of(points_[index]);
    hosts_->shape(shape);
    plan::Scenario s = scenario(o_.netns, o_.per_host, "gloo");
    s.wake_wait_ms = wake_wait_ms_[shape.label];
    s.colocated_slowdown = slowdown_;
    s.nodes_share_machine = true;
    std::vector<std::string> launch = link_launch(o_.per_host);
    const std::string overlap = plan::netns_overlap(s.overlap, hosts_share_cores());
    if (overlap != s.overlap) {
      // auto turns overlap on across hosts, but these hosts' training
      // threads hold every core of this one machine, so their engine
      // threads would get one only when the scheduler preempts compute:
      // that measures the scheduler (36-48 ms for the same run, docs/plan.md
      // run 5), where a cluster host has cores of its own. Off measures the
      // network; LOCKSTEP_OVERLAP=on still runs (and marks) the other case.
      launch.insert(launch.end(), {"-x", "LOCKSTEP_OVERLAP=" + overlap});
      s.overlap = overlap;
      if (!said_overlap_off_)
        progress("the namespace hosts fill this machine's {} cores: their runs use "
                 "LOCKSTEP_OVERLAP={} (set LOCKSTEP_OVERLAP=on to measure overlap anyway)",
                 cores(), overlap);
      said_overlap_off_ = true;
    }
    if (auto measured = measure(launch, tag_of(points_[index]) + r)) {
      record(index, *measured, net_of_[shape.label], s);
      if (measured->overlap && hosts_share_cores()) results_[index].comm_without_core = true;
    }
  }


  static std::string note_of(const PointResult& res) {
    if (res.oversubscribed) return "OVERSUBSCRIBED (more ranks than cores: measures the scheduler)";
    if (res.comm_without_core)
      return "NO CORE FOR COMMUNICATION (hosts share this machine's cores and overlap is on: "
             "measures the scheduler; LOCKSTEP_OVERLAP=off validates the network)";
    return "";
  }

  void report() {
    for (size_t i = 0; i < points_.size(); ++i) {
      const plan::ValidationPoint& p = points_[i];
      const PointResult& res = results_[i];
      const plan::RoundErrors e = res.measured_ms.empty()
                                      ? plan::RoundErrors{}
                                      : plan::round_errors(res.measured_ms, res.predicted_ms);
      if (o_.json) {
        fmt::print("{}\n", nlohmann::json{{"np", p.np},
                                          {"hosts", p.hosts},
                                          {"network", p.network},
                                          {"backend", res.backend},
                                          {"overlap", res.overlap},
                                          {"rounds", res.measured_ms.size()},
                                          {"measured_step_ms", e.median_measured_ms},
                                          {"predicted_step_ms", e.median_predicted_ms},
                                          {"error_pct", e.median_error_pct},
                                          {"error_rounds_pct", e.error_pct},
                                          {"error_min_pct", e.min_error_pct},
                                          {"error_max_pct", e.max_error_pct},
                                          {"rounds_within_10pct", e.rounds_within(10)},
                                          {"measured_rounds_ms", res.measured_ms},
                                          {"predicted_rounds_ms", res.predicted_ms},
                                          {"measured_sync_ms", median(res.measured_sync_ms)},
                                          {"predicted_comm_ms", median(res.predicted_comm_ms)},
                                          {"compute_slowdown", median(res.slowdown)},
                                          {"compute_slowdown_rounds", res.slowdown},
                                          {"wake_wait_ms", res.wake_wait_ms},
                                          {"oversubscribed", res.oversubscribed},
                                          {"comm_without_core", res.comm_without_core}}
                                           .dump());
        continue;
      }
      if (i == 0) {
        fmt::print("# lockstep plan validate: {} ({} cores, {} intra-op thread(s) per rank, {} "
                   "round(s); each round predicted from its own np 1 profile; error = median "
                   "of the rounds' errors)\n", shell_join(o_.program), cores(), o_.threads,
                   o_.rounds);
        fmt::print("{:>4} {:>6} {:>16} {:>8} {:>8} {:>13} {:>14} {:>8} {:>17} {:>8} {:>11} "
                   "{:>11} {:>9} {:>7}  {}\n", "np", "hosts", "network", "backend", "overlap",
                   "measured(ms)", "predicted(ms)", "error", "range", "in 10%", "sync meas.",
                   "comm pred.", "compute x", "W(ms)", "note");
      }
      fmt::print("{:>4} {:>6} {:>16} {:>8} {:>8} {:>13.2f} {:>14.2f} {:>+7.1f}% {:>17} {:>8} "
                 "{:>11.2f} {:>11.2f} {:>9.3f} {:>7.2f}  {}\n", p.np, p.hosts, p.network,
                 res.backend, res.overlap ? "on" : "off", e.median_measured_ms,
                 e.median_predicted_ms, e.median_error_pct,
                 fmt::format("{:+.1f}..{:+.1f}%", e.min_error_pct, e.max_error_pct),
                 fmt::format("{}/{}", e.rounds_within(10), e.error_pct.size()),
                 median(res.measured_sync_ms), median(res.predicted_comm_ms),
                 median(res.slowdown), res.wake_wait_ms,
                 note_of(res));
    }
    if (o_.json) return;
    fmt::print("# per round: measured / predicted (ms), error\n");
    for (size_t i = 0; i < points_.size(); ++i) {
      const PointResult& res = results_[i];
      std::string rounds;
      for (size_t k = 0; k < res.measured_ms.size(); ++k)
        rounds += fmt::format("  r{} {:.2f}/{:.2f} {:+.1f}%", k + 1, res.measured_ms[k],
                              res.predicted_ms[k],
                              100 * (res.predicted_ms[k] - res.measured_ms[k]) / res.measured_ms[k]);
      fmt::print("# np {} {}:{}\n", points_[i].np, points_[i].network, rounds);
    }
    fmt::print("# files: {}\n", dir_);
  }


  const ValidateOptions& o_;
  std::string dir_;
  int64_t threshold_ = 0;
  std::vector<int> nps_;
  plan::NetworkModel given_;  // --network, resolved (empty without)
  std::optional<plan::NetworkModel> shm_network_;  // the latest shared-memory costs
  std::vector<LinkShape> shapes_;
  std::unique_ptr<NetnsHosts> hosts_;  // removed (namespaces and all) with the validator
  std::map<std::string, plan::NetworkModel> net_of_;  // per link shape
  std::map<std::string, double> wake_wait_ms_;         // per link shape
  std::vector<plan::ValidationPoint> points_;
  std::vector<PointResult> results_;  // per point
  std::optional<plan::Profile> profile_;  // the np 1 profile of the point measured next
  bool said_overlap_off_ = false;
  double slowdown_ = 1.0;                 // its co-location calibration
};

}  // namespace

int validate_main(int argc, char** argv) {
  CLI::App app{"Measure a program at several scales here and compare with the planner's "
               "prediction (docs/plan.md)", "lockstep plan validate"};
  ValidateOptions o;
  app.add_option("--np", o.np, "ranks on this host, e.g. 1,2,3")->capture_default_str();
  app.add_option("--netns", o.netns, "also run on this many network-namespace hosts, one rank "
                 "each (root)")->capture_default_str();
  app.add_option("--per-host", o.per_host, "ranks per netns host (2 or more: hierarchical "
                 "allreduce)")->capture_default_str();
  app.add_option("--shape", o.shapes, "links of the netns hosts: RATE[:LATENCY],... (latency "
                 "needs netem)")->capture_default_str();
  app.add_option("--network", o.networks, "network fits taken beforehand (else fitted here)");
  app.add_option("--steps", o.steps, "profiled steps per point")->capture_default_str();
  app.add_option("--warmup", o.warmup, "steps skipped per point")->capture_default_str();
  app.add_option("--threads", o.threads, "intra-op threads per rank, the same at every point")
      ->capture_default_str();
  app.add_option("--workdir", o.workdir, "keep profiles, fits and logs here (default: a new "
                 "temporary directory)");
  app.add_option("--timeout", o.timeout_s, "seconds per run")->capture_default_str();
  app.add_flag("--json", o.json, "one JSON line per point");
  app.add_flag("--quick", o.quick, "short network fits (for CI; less accurate)");
  app.add_flag("!--no-contention", o.contention, "predict co-located ranks with their compute "
               "alone (skip the calibration run that measures the slowdown)");
  app.add_option("--rounds", o.rounds, "rounds; in each, every point runs right after an np 1 "
                 "profile of its own (np 1, np 2, np 1, np 2, ...); the error is the median of "
                 "the rounds' errors")->capture_default_str();
  app.add_option("--wake-wait", o.wake_wait, "netns hosts sharing the cores: the wait for a "
                 "core per engine operation during compute: tick (one period of the kernel's "
                 "CONFIG_HZ), sweep (a Gloo fit beside busy threads) or milliseconds")
      ->capture_default_str();
  app.add_option("program", o.program, "-- PROGRAM ARGS...")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (o.steps < 1 || o.warmup < 0 || o.threads < 1 || o.netns < 0 || o.per_host < 1 ||
        o.rounds < 1)
      throw InvalidArgument(
          "--steps, --threads, --per-host and --rounds must be >= 1, --warmup and --netns >= 0");
    if (o.wake_wait != "tick" && o.wake_wait != "sweep") parse_wake_wait_ms(o.wake_wait);
    stop_on_signals();
    Validator v(o);
    return v.run();
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "lockstep plan validate: %s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "lockstep plan validate: %s\n", e.what());
    return 1;
  }
}

}  // namespace lockstep::plan_tool
