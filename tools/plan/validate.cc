// `lockstep plan validate`: runs a program at several scales on this
// machine, measures its step time with lockstep's own step profiler, and
// compares it with what the planner predicts from a profile taken at np 1
// and network fits taken beforehand (docs/plan.md).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/plan/simulator.h"
#include "plan/commands.h"
#include "plan/job.h"
#include "plan/netns.h"

namespace lockstep::plan_tool {
namespace {

namespace fs = std::filesystem;

struct Options {
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
  int rounds = 1;
  double timeout_s = 300;
  std::vector<std::string> program;
};

struct Point {
  int np = 1, hosts = 1;
  std::string network = "shm";
  bool oversubscribed = false;
  std::string backend;
  bool overlap = false;
  // One entry per round.
  std::vector<double> measured_ms, predicted_ms, measured_sync_ms, predicted_comm_ms;
  std::vector<double> slowdown;  // the co-location factor each round's prediction used
};

int cores() { return std::max(1u, std::thread::hardware_concurrency()); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Runs the points round by round: each round profiles np 1 again and
// predicts that round's points from it, so slow drifts of a shared
// machine's load hit the profile and the measurements alike. Medians over
// rounds are reported.
class Validator {
 public:
  explicit Validator(const Options& o) : o_(o) {
    dir_ = o.workdir.empty() ? make_temp_dir() : o.workdir;
    fs::create_directories(dir_);
    threshold_ = static_cast<int64_t>(
        parse_bytes(knob_string("LOCKSTEP_FUSION_THRESHOLD"), "LOCKSTEP_FUSION_THRESHOLD"));
  }

  int run() {
    if (o_.netns > 0) prepare_netns();  // bad shapes fail before any measurement
    nps_ = parse_int_list(o_.np, "--np");
    for (int round = 0; round < o_.rounds; ++round) {
      const std::string r = o_.rounds > 1 ? fmt::format("-r{}", round) : "";
      progress("round {}/{}: profile at np 1 ({} thread(s) per rank)", round + 1, o_.rounds,
               o_.threads);
      auto profile = measure({"-np", "1"}, "np1" + r);
      if (!profile) return 1;
      // Every round fits again: this VM switches between states where
      // shared memory is fast and compute contended, or the reverse, so a
      // fit from another round would mix states.
      if (round == 0 || o_.networks.empty()) shm_network_ = network_for_shm(r);
      for (int np : nps_) shm_point(*profile, np, r);
      netns_points(*profile, r, round == 0);
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
  // fit at the validated world sizes that fit on the cores (an
  // oversubscribed sweep would measure the scheduler).
  plan::NetworkModel network_for_shm(const std::string& r) {
    if (!o_.networks.empty()) {
      plan::NetworkModel m = plan::resolve_network(o_.networks);
      if (m.has("shm")) return m;
    }
    std::string list;
    for (int np : nps_)
      if (np >= 2 && np <= cores()) list += (list.empty() ? "" : ",") + std::to_string(np);
    if (list.empty()) list = "2";
    progress("fitting shared memory at np {}", list);
    plan::NetworkModel m = fit("shm", {"--np", list}, "shm" + r);
    return o_.networks.empty() ? m : plan::merge(plan::resolve_network(o_.networks), m);
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

  Point& point(int np, int hosts, const std::string& network) {
    for (auto& p : points_)
      if (p.np == np && p.hosts == hosts && p.network == network) return p;
    Point p;
    p.np = np;
    p.hosts = hosts;
    p.network = network;
    p.oversubscribed = np * o_.threads > cores();
    points_.push_back(p);
    return points_.back();
  }

  void record(Point& p, const plan::Profile& profile, const plan::Profile& measured,
              const plan::NetworkModel& net, const plan::Scenario& s) {
    p.slowdown.push_back(s.colocated_slowdown);
    plan::StepPrediction pred = plan::simulate(profile, net, s);
    plan::ProfileSummary m = plan::summarize(measured);
    p.measured_ms.push_back(m.step_ms);
    p.measured_sync_ms.push_back(m.sync_ms);
    p.predicted_ms.push_back(pred.step_ms);
    p.predicted_comm_ms.push_back(pred.exposed_comm_ms + pred.straggler_ms);
    p.backend = pred.backend;
    p.overlap = pred.overlap;
    progress("np {} hosts {} {}: measured {:.2f} ms, predicted {:.2f} ms ({:+.1f}%)", p.np,
             p.hosts, p.network, m.step_ms, pred.step_ms,
             100 * (pred.step_ms - m.step_ms) / m.step_ms);
  }

  void shm_point(const plan::Profile& profile, int np, const std::string& r) {
    progress("measuring np {} on this host", np);
    // np 1 runs again: its error is the run-to-run noise of the profile.
    auto measured = measure({"-np", std::to_string(np)},
                            np == 1 ? "np1-again" + r : fmt::format("np{}{}", np, r));
    if (!measured) return;
    plan::Scenario s = scenario(1, np, "gloo");
    if (np > 1) s.colocated_slowdown = colocated_slowdown(profile, np, r);
    record(point(np, 1, np == 1 ? "none" : "shm"), profile, *measured, shm_network_, s);
  }

  // How much slower a rank computes beside np - 1 others on this host:
  // compute (step - sync) of a separate calibration run at np over the np 1
  // profile's. Not measured where ranks outnumber cores (that would be the
  // scheduler, which the point is marked for) nor with --no-contention.
  double colocated_slowdown(const plan::Profile& profile, int np, const std::string& r) {
    if (!o_.contention || np * o_.threads > cores()) return 1.0;
    progress("calibrating co-located compute at np {}", np);
    auto calib = measure({"-np", std::to_string(np)}, fmt::format("np{}-calib{}", np, r));
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

  // What a small collective waits for a core while computing threads hold
  // them all: the same sweep beside as many busy threads as training runs,
  // minus the idle one (medians over the points up to 4 KiB).
  double wake_wait_ms(std::vector<std::string> fit_args, const std::string& label) {
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

  void netns_points(const plan::Profile& profile, const std::string& r, bool first_round) {
    if (!hosts_) return;
    // The fit runs one rank per host: the flat ring among hosts that is also
    // the hierarchical allreduce's cross-host stage.
    const std::vector<std::string> common = {"--remote-exec", "ip netns exec {host}",
                                             "--rendezvous-addr", hosts_->launcher_ip(), "-H"};
    std::vector<std::string> launch = common, fit_launch = common;
    launch.push_back(hosts_->host_list(o_.per_host));
    fit_launch.push_back(hosts_->host_list(1));
    for (const LinkShape& shape : shapes_) {
      hosts_->shape(shape);
      if (first_round) {
        progress("fitting Gloo over {} hosts shaped to {}", o_.netns, shape.label);
        std::vector<std::string> fit_args;
        for (const auto& a : fit_launch) fit_args.push_back("--launcher-arg=" + a);
        net_of_[shape.label] = plan::merge(shm_network_, fit("gloo", fit_args, "gloo-" + shape.label));
        wake_wait_ms_[shape.label] = hosts_share_cores() ? wake_wait_ms(fit_args, shape.label) : 0;
      }
      progress("measuring {} hosts over {}", o_.netns, shape.label);
      plan::Scenario s = scenario(o_.netns, o_.per_host, "gloo");
      s.wake_wait_ms = wake_wait_ms_[shape.label];
      if (auto measured = measure(launch, fmt::format("netns{}-{}{}", o_.netns, shape.label, r)))
        record(point(o_.netns * o_.per_host, o_.netns, "gloo " + shape.label), profile, *measured,
               net_of_[shape.label], s);
    }
  }

  void report() {
    for (const auto& p : points_) {
      const double meas = median(p.measured_ms), pred = median(p.predicted_ms);
      const double err = meas > 0 ? 100 * (pred - meas) / meas : 0;
      if (o_.json) {
        fmt::print("{}\n", nlohmann::json{{"np", p.np},
                                          {"hosts", p.hosts},
                                          {"network", p.network},
                                          {"backend", p.backend},
                                          {"overlap", p.overlap},
                                          {"rounds", p.measured_ms.size()},
                                          {"measured_step_ms", meas},
                                          {"predicted_step_ms", pred},
                                          {"error_pct", err},
                                          {"measured_rounds_ms", p.measured_ms},
                                          {"predicted_rounds_ms", p.predicted_ms},
                                          {"measured_sync_ms", median(p.measured_sync_ms)},
                                          {"predicted_comm_ms", median(p.predicted_comm_ms)},
                                          {"compute_slowdown", median(p.slowdown)},
                                          {"oversubscribed", p.oversubscribed}}
                                           .dump());
        continue;
      }
      if (&p == &points_.front()) {
        fmt::print("# lockstep plan validate: {} ({} cores, {} intra-op thread(s) per rank, {} "
                   "round(s), medians over rounds)\n", shell_join(o_.program), cores(), o_.threads,
                   o_.rounds);
        fmt::print("{:>4} {:>6} {:>16} {:>8} {:>8} {:>13} {:>14} {:>8} {:>11} {:>11} {:>9}  {}\n",
                   "np", "hosts", "network", "backend", "overlap", "measured(ms)",
                   "predicted(ms)", "error", "sync meas.", "comm pred.", "compute x", "note");
      }
      fmt::print("{:>4} {:>6} {:>16} {:>8} {:>8} {:>13.2f} {:>14.2f} {:>+7.1f}% {:>11.2f} "
                 "{:>11.2f} {:>9.3f}  {}\n", p.np, p.hosts, p.network, p.backend,
                 p.overlap ? "on" : "off", meas, pred, err, median(p.measured_sync_ms),
                 median(p.predicted_comm_ms), median(p.slowdown),
                 p.oversubscribed ? "OVERSUBSCRIBED (more ranks than cores: measures the "
                                    "scheduler)" : "");
    }
    if (!o_.json) fmt::print("# files: {}\n", dir_);
  }

  const Options& o_;
  std::string dir_;
  int64_t threshold_ = 0;
  std::vector<int> nps_;
  plan::NetworkModel shm_network_;
  std::vector<LinkShape> shapes_;
  std::unique_ptr<NetnsHosts> hosts_;  // removed (namespaces and all) with the validator
  std::map<std::string, plan::NetworkModel> net_of_;  // per link shape
  std::map<std::string, double> wake_wait_ms_;         // per link shape
  std::vector<Point> points_;
};

}  // namespace

int validate_main(int argc, char** argv) {
  CLI::App app{"Measure a program at several scales here and compare with the planner's "
               "prediction (docs/plan.md)", "lockstep plan validate"};
  Options o;
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
  app.add_option("--rounds", o.rounds, "repeat every point (and the np 1 profile) this many "
                 "times, interleaved; medians are reported")->capture_default_str();
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
