// `lockstep plan layouts`: samples/s of every workers x threads layout of
// one host, from a profile, ranked, with the recommended one
// (plan/layouts.h; docs/plan.md, "Layouts of one host").
#include <sched.h>

#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/plan/layouts.h"
#include "tools/common/cli_main.h"
#include "tools/plan/commands.h"
#include "tools/plan/layouts_format.h"

namespace lockstep::plan_tool {
namespace {

struct LayoutsOptions {
  std::string profile;
  std::string scaling_profile;
  std::vector<std::string> networks;
  int cpus = 0;
  std::string layouts;
  double serial_fraction = -1;  // < 0: fitted or the default
  double contention = 0;
  std::string fusion = "1MiB";
  std::string overlap = "auto";
  double jitter_ms = -1;
  double samples_per_step = 0;
  bool json = false;
};

void add_layouts_options(CLI::App& app, LayoutsOptions& o) {
  app.add_option("--profile", o.profile, "model profile of one worker (lockstep profile)")
      ->required();
  app.add_option("--network", o.networks,
                 "`lockstep bench fit --backend shm` file (or preset); "
                 "repeat to combine")
      ->required();
  app.add_option("--cpus", o.cpus, "CPUs of the host (default: those this process may use)");
  app.add_option("--layouts", o.layouts,
                 "WORKERSxTHREADS,... (default: N x the placement's threads, N = 1..CPUs)");
  app.add_option(
      "--serial-fraction", o.serial_fraction,
      fmt::format(
          "Amdahl serial fraction of one worker's step, >= 0; > 1: slower with more threads (default: fitted "
          "from --scaling-profile, else {})",
          plan::kDefaultSerialFraction));
  app.add_option("--scaling-profile", o.scaling_profile,
                 "a profile of the same program at another thread count: fits the serial fraction");
  app.add_option("--contention", o.contention,
                 "compute slowdown per extra co-located worker (0.05: 8 workers compute 1.35x "
                 "slower than one alone)")
      ->capture_default_str();
  app.add_option("--fusion", o.fusion, "fusion threshold (LOCKSTEP_FUSION_THRESHOLD)")
      ->capture_default_str();
  app.add_option("--overlap", o.overlap, "auto|on|off (LOCKSTEP_OVERLAP)")->capture_default_str();
  app.add_option("--jitter-ms", o.jitter_ms,
                 "per-worker step-time spread (default: the profile's)");
  app.add_option("--samples-per-step", o.samples_per_step,
                 "override the profile's samples per step and worker");
  app.add_flag("--json", o.json, "one JSON object per layout");
}

int host_cpus(int requested) {
  if (requested > 0) return requested;
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
}

// The serial fraction: given, fitted from two profiles, or the default.
plan::ThreadScaling scaling_of(const LayoutsOptions& o, const plan::Profile& profile) {
  plan::ThreadScaling s;
  s.contention = o.contention;
  const std::string k = o.contention > 0 ? "contention given" : "no contention";
  if (o.serial_fraction >= 0) {
    s.serial_fraction = o.serial_fraction;
    s.source = "--serial-fraction, " + k;
  } else if (!o.scaling_profile.empty()) {
    const plan::Profile other = plan::load_profile(o.scaling_profile);
    s.serial_fraction =
        plan::fit_serial_fraction(plan::summarize(profile).compute_ms, profile.intra_op_threads,
                                  plan::summarize(other).compute_ms, other.intra_op_threads);
    s.source = fmt::format("fitted from {} threads and {} threads, {}", profile.intra_op_threads,
                           other.intra_op_threads, k);
  } else {
    s.source = "default serial fraction, not measured: pass --scaling-profile, " + k;
  }
  return s;
}

int run_layouts(const LayoutsOptions& o) {
  plan::Profile profile = plan::load_profile(o.profile);
  if (o.samples_per_step > 0)
    for (auto& s : profile.steps) s.samples = static_cast<int64_t>(o.samples_per_step);
  const plan::NetworkModel network = plan::resolve_network(o.networks);
  plan::LayoutQuery q;
  q.host_cpus = host_cpus(o.cpus);
  q.scaling = scaling_of(o, profile);
  q.scenario.fusion_threshold = static_cast<int64_t>(parse_bytes(o.fusion, "--fusion"));
  q.scenario.overlap = o.overlap;
  q.scenario.jitter_ms = o.jitter_ms;
  if (!o.layouts.empty()) q.layouts = plan::parse_layouts(o.layouts, "--layouts");
  const auto ranked = plan::rank_layouts(profile, network, q);
  if (o.json) {
    for (size_t i = 0; i < ranked.size(); ++i)
      fmt::print("{}\n", layout_json(ranked[i], q.scaling, i == 0).dump());
    return 0;
  }
  const plan::ProfileSummary sum = plan::summarize(profile);
  fmt::print(
      "# lockstep plan layouts: {} ({:.2f} ms compute at {} worker(s) x {} thread(s), "
      "{:.0f} samples/step/worker)\n",
      o.profile, sum.compute_ms, profile.local_size, profile.intra_op_threads,
      sum.samples_per_step);
  fmt::print("# host: {} CPUs; network: {}\n# {}\n", q.host_cpus, network.name,
             describe_scaling(q.scaling));
  fmt::print("{}\n", layout_header());
  for (const auto& p : ranked) fmt::print("{}\n", layout_row(p));
  const plan::Layout best = ranked.front().layout;
  fmt::print(
      "# recommended: {} worker(s) x {} thread(s): lockstep run -np {} "
      "--threads-per-worker {} PROGRAM\n",
      best.workers, best.threads, best.workers, best.threads);
  return 0;
}

}  // namespace

int layouts_main(int argc, char** argv) {
  CLI::App app{"Rank workers x threads layouts of one host for a profiled model (docs/plan.md)",
               "lockstep plan layouts"};
  LayoutsOptions o;
  add_layouts_options(app, o);
  return cli::run_command(app, argc, argv, "lockstep plan layouts", [&] { return run_layouts(o); });
}

}  // namespace lockstep::plan_tool
