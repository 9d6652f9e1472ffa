// `lockstep plan validate`: the runs (the program under `lockstep run`,
// profiled) and the network fits (`lockstep bench fit`) it predicts from,
// and the co-location and wake-wait calibrations (validate.h).
#include <sys/utsname.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/executable.h"
#include "lockstep/plan/stats.h"
#include "tools/plan/job.h"
#include "tools/plan/validate.h"

namespace lockstep::plan_tool::validate {
namespace {

namespace fs = std::filesystem;
using plan::detail::median;

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

}  // namespace

double parse_wake_wait_ms(const std::string& text) {
  try {
    size_t used = 0;
    const double ms = std::stod(text, &used);
    if (used == text.size() && ms >= 0 && std::isfinite(ms)) return ms;
  } catch (const std::exception&) {
  }
  throw InvalidArgument(
      fmt::format("--wake-wait {}: give tick, sweep or a wait in milliseconds (>= 0)", text));
}

// Runs the program under `lockstep run LAUNCH...` until rank 0 wrote its
// profile, and returns it (nullopt after printing why it failed).
std::optional<plan::Profile> Validator::measure(const std::vector<std::string>& launch,
                                                const std::string& tag) {
  const std::string out = dir_ + "/profile-" + tag + ".json";
  JobSpec job;
  job.argv = {executable_dir() + "/lockstep", "run"};
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
    fmt::print(stderr,
               "lockstep plan validate: {}: no profile (exit {}{}); the program needs "
               "at least {} steps. Last lines of {}:\n{}",
               tag, r.exit_code, r.timed_out ? ", timed out" : "", o_.warmup + o_.steps,
               job.log_path, tail_of(job.log_path));
    return std::nullopt;
  }
  return plan::load_profile(out);
}

plan::NetworkModel Validator::fit(const std::string& backend, const std::vector<std::string>& args,
                                  const std::string& tag) {
  const std::string out = dir_ + "/net-" + tag + ".json";
  JobSpec job;
  job.argv = {executable_dir() + "/lockstep-bench-fit",
              "--backend",
              backend,
              "--out",
              out,
              "--quiet",
              "--name",
              "fit: " + tag};
  job.argv.insert(job.argv.end(), args.begin(), args.end());
  if (o_.quick)
    job.argv.insert(job.argv.end(), {"--seconds", "0.02", "--sizes", "4B:1MiB", "--factor", "8"});
  job.log_path = dir_ + "/fit-" + tag + ".log";
  job.timeout_s = 600;
  job.label = "fit " + tag;
  JobResult r = run_job(job);
  if (r.exit_code != 0)
    throw Error(fmt::format("the {} fit failed (exit {}); last lines of {}:\n{}", tag, r.exit_code,
                            job.log_path, tail_of(job.log_path)));
  return plan::load_network(out);
}

// The shared-memory costs: the given networks if they have them, else a
// fit at `np` (0: at the validated world sizes that fit on the cores; an
// oversubscribed sweep would measure the scheduler).
plan::NetworkModel Validator::network_for_shm(const std::string& r, int np) {
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
const plan::NetworkModel& Validator::shm_costs() {
  if (!shm_network_) shm_network_ = network_for_shm("", 0);
  return *shm_network_;
}

void Validator::shm_point(int index, const std::string& r) {
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
double Validator::colocated_slowdown(const plan::Profile& profile, int np, const std::string& tag) {
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

// W, the wait for a core of every engine operation that starts while
// the hosts' training threads hold all cores (docs/plan.md, section 4):
// one kernel tick by default (--wake-wait tick), the busy sweep's small
// collectives minus the idle ones (sweep), or a given value.
double Validator::wake_wait_ms(std::vector<std::string> fit_args, const std::string& label) {
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
  progress(
      "{}: small collectives {:.3f} ms beside busy threads, {:.3f} ms idle: a wait of "
      "{:.3f} ms per engine operation during compute",
      label, small(busy), small(net_of_[label]), w);
  return w;
}

// One period of the kernel's scheduler tick, from its configuration.
double Validator::tick_ms() {
  const std::optional<int> hz = kernel_hz();
  if (!hz)
    throw Error(
        "--wake-wait tick: CONFIG_HZ is in neither /proc/config.gz nor "
        "/boot/config-RELEASE; give --wake-wait MS or --wake-wait sweep");
  progress("the wait for a core: one scheduler tick, CONFIG_HZ={} ({:.3f} ms)", *hz, 1e3 / *hz);
  return 1e3 / *hz;
}

}  // namespace lockstep::plan_tool::validate
