// `lockstep plan validate`: runs a program at several scales on this
// machine, measures its step time with lockstep's own step profiler, and
// compares it with what the planner predicts from a profile taken at np 1
// and network fits taken beforehand (docs/plan.md). This file: the command
// line and the schedule; the phases in validate_*.cc (validate.h).
#include "tools/plan/validate.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "tools/common/cli_main.h"
#include "tools/common/process.h"
#include "tools/plan/commands.h"

namespace lockstep::plan_tool {
namespace validate {
namespace {

namespace fs = std::filesystem;

std::string make_temp_dir() {
  // mkdtemp(3) replaces the six trailing X of its template with a unique name.
  std::string t = (fs::temp_directory_path() / "lockstep-validate-XXXXXX").string();
  if (!mkdtemp(t.data()))
    throw Error(
        fmt::format("plan validate: cannot create a temporary directory {}: {} (set "
                    "TMPDIR to a writable directory)",
                    t, std::strerror(errno)));
  return t;
}

}  // namespace

Validator::Validator(const Options& o) : o_(o) {
  dir_ = o.workdir.empty() ? make_temp_dir() : o.workdir;
  fs::create_directories(dir_);
  threshold_ = static_cast<int64_t>(
      parse_bytes(knob_string("LOCKSTEP_FUSION_THRESHOLD"), "LOCKSTEP_FUSION_THRESHOLD"));
}

int Validator::run() {
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
        if (p->netns())
          netns_point(run.point, r);
        else
          shm_point(run.point, r);
        break;
    }
  }
  report();
  return 0;
}

// The points in schedule order: --np on this host, then each shaped link.
void Validator::make_points() {
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

plan::Scenario Validator::scenario(int hosts, int per_host, const std::string& cross) const {
  plan::Scenario s;
  s.topology = {hosts, per_host, cross, knob_string("LOCKSTEP_HIERARCHICAL")};
  s.fusion_threshold = threshold_;
  s.overlap = knob_string("LOCKSTEP_OVERLAP");
  s.cores_per_node = cores();
  s.threads_per_rank = o_.threads;
  return s;
}

const LinkShape& Validator::shape_of(const plan::ValidationPoint& p) const {
  for (const auto& s : shapes_)
    if ("gloo " + s.label == p.network) return s;
  throw Error(fmt::format("no link shape for point {}", p.network));
}

// The measured run's file tag: np 1 "np1-again" (its error is the
// run-to-run noise of the profile), np N "npN", netns "netnsH-SHAPE".
std::string Validator::tag_of(const plan::ValidationPoint& p) const {
  if (p.netns()) return fmt::format("netns{}-{}", p.hosts, shape_of(p).label);
  return p.np == 1 ? "np1-again" : fmt::format("np{}", p.np);
}

void Validator::record(int index, const plan::Profile& measured, const plan::NetworkModel& net,
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
  progress("np {} hosts {} {}: measured {:.2f} ms, predicted {:.2f} ms ({:+.1f}%)", p.np, p.hosts,
           p.network, m.step_ms, pred.step_ms, 100 * (pred.step_ms - m.step_ms) / m.step_ms);
}

}  // namespace validate

int validate_main(int argc, char** argv) {
  CLI::App app{
      "Measure a program at several scales here and compare with the planner's "
      "prediction (docs/plan.md)",
      "lockstep plan validate"};
  validate::Options o;
  app.add_option("--np", o.np, "ranks on this host, e.g. 1,2,3")->capture_default_str();
  app.add_option("--netns", o.netns,
                 "also run on this many network-namespace hosts, one rank "
                 "each (root)")
      ->capture_default_str();
  app.add_option("--per-host", o.per_host,
                 "ranks per netns host (2 or more: hierarchical "
                 "allreduce)")
      ->capture_default_str();
  app.add_option("--shape", o.shapes,
                 "links of the netns hosts: RATE[:LATENCY],... (latency "
                 "needs netem)")
      ->capture_default_str();
  app.add_option("--network", o.networks, "network fits taken beforehand (else fitted here)");
  app.add_option("--steps", o.steps, "profiled steps per point")->capture_default_str();
  app.add_option("--warmup", o.warmup, "steps skipped per point")->capture_default_str();
  app.add_option("--threads", o.threads, "intra-op threads per rank, the same at every point")
      ->capture_default_str();
  app.add_option("--workdir", o.workdir,
                 "keep profiles, fits and logs here (default: a new "
                 "temporary directory)");
  app.add_option("--timeout", o.timeout_s, "seconds per run")->capture_default_str();
  app.add_flag("--json", o.json, "one JSON line per point");
  app.add_flag("--quick", o.quick, "short network fits (for CI; less accurate)");
  app.add_flag("!--no-contention", o.contention,
               "predict co-located ranks with their compute "
               "alone (skip the calibration run that measures the slowdown)");
  app.add_option("--rounds", o.rounds,
                 "rounds; in each, every point runs right after an np 1 "
                 "profile of its own (np 1, np 2, np 1, np 2, ...); the error is the median of "
                 "the rounds' errors")
      ->capture_default_str();
  app.add_option("--wake-wait", o.wake_wait,
                 "netns hosts sharing the cores: the wait for a "
                 "core per engine operation during compute: tick (one period of the kernel's "
                 "CONFIG_HZ), sweep (a Gloo fit beside busy threads) or milliseconds")
      ->capture_default_str();
  app.add_option("program", o.program, "-- PROGRAM ARGS...")->required();
  return cli::run_command(app, argc, argv, "lockstep plan validate", [&] {
    if (o.steps < 1 || o.warmup < 0 || o.threads < 1 || o.netns < 0 || o.per_host < 1 ||
        o.rounds < 1)
      throw InvalidArgument(
          "--steps, --threads, --per-host and --rounds must be >= 1, --warmup and --netns >= 0");
    if (o.wake_wait != "tick" && o.wake_wait != "sweep") validate::parse_wake_wait_ms(o.wake_wait);
    tools::catch_stop_signals();
    validate::Validator v(o);
    return v.run();
  });
}

}  // namespace lockstep::plan_tool
