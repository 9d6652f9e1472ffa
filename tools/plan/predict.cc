// `lockstep plan`: step time, communication and scaling efficiency of a
// profiled model from 1 to N nodes (docs/plan.md).
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/plan/simulator.h"
#include "tools/common/cli_main.h"
#include "tools/plan/commands.h"

namespace lockstep::plan_tool {
namespace {

struct PredictOptions {
  std::string profile;
  std::vector<std::string> networks;
  std::string nodes = "1:1024";
  int ranks_per_node = 1;
  std::string fusion = "1MiB";
  std::string overlap = "auto";
  std::string compression = "none";
  std::string strategy = "data";
  std::string cross;
  std::string hierarchical = "auto";
  double jitter_ms = -1;
  int cores_per_node = 0;
  int threads_per_rank = 1;
  double compute_slowdown = 1;
  double wake_wait_ms = 0;
  double samples_per_step = 0;
  bool json = false;
};

void add_options(CLI::App& app, PredictOptions& o) {
  app.add_option("--profile", o.profile, "model profile (lockstep profile, or lockstep plan zoo)")
      ->required();
  app.add_option("--network", o.networks,
                 "preset name or `lockstep bench fit` file; repeat to combine (later ones win), "
                 "e.g. --network shm.json --network eth-25g")
      ->required();
  app.add_option("--nodes", o.nodes, "node counts: 1,2,4 or MIN:MAX (powers of two)")
      ->capture_default_str();
  app.add_option("--ranks-per-node", o.ranks_per_node, "workers per node")->capture_default_str();
  app.add_option("--fusion", o.fusion, "fusion threshold (LOCKSTEP_FUSION_THRESHOLD)")
      ->capture_default_str();
  app.add_option("--overlap", o.overlap, "auto|on|off (LOCKSTEP_OVERLAP)")->capture_default_str();
  app.add_option("--compression", o.compression,
                 "none|fp16|bf16|powersgd:R|onebit|onebit-adam|onebit-lamb gradient compression "
                 "(the last four past their warm-up; PowerSGD needs a profile with shapes)")
      ->capture_default_str();
  app.add_option("--strategy", o.strategy, "data (zero and pipeline are not modelled yet)")
      ->capture_default_str();
  app.add_option("--cross", o.cross,
                 "transport across nodes: gloo|mpi|nccl (default: the "
                 "network model's)");
  app.add_option("--hierarchical", o.hierarchical, "auto|0|1 (LOCKSTEP_HIERARCHICAL)")
      ->capture_default_str();
  app.add_option("--jitter-ms", o.jitter_ms,
                 "per-rank step-time spread (sigma); default: measured in the profile");
  app.add_option("--cores-per-node", o.cores_per_node,
                 "cores per node, for overlap=auto and shared-memory contention (0: plenty)")
      ->capture_default_str();
  app.add_option("--threads-per-rank", o.threads_per_rank, "intra-op threads per worker")
      ->capture_default_str();
  app.add_option("--compute-slowdown", o.compute_slowdown,
                 "how much slower a rank computes beside the other ranks of its node than alone "
                 "(memory-bus contention; plan validate measures it)")
      ->capture_default_str();
  app.add_option("--wake-wait-ms", o.wake_wait_ms,
                 "wait for a core of every engine operation that starts while compute holds all "
                 "cores, and of the first as compute ends (ranks without a core for "
                 "communication; plan validate takes one scheduler tick)")
      ->capture_default_str();
  app.add_option("--samples-per-step", o.samples_per_step,
                 "override the profile's samples per step and rank");
  app.add_flag("--json", o.json, "one JSON object per node count");
}

int run(const PredictOptions& o) {
  if (o.strategy != "data")
    throw InvalidArgument(fmt::format(
        "--strategy {}: only data parallelism is modelled; ZeRO and pipeline schedules are not "
        "(docs/plan.md, 'Not modelled')",
        o.strategy));
  plan::Profile profile = plan::load_profile(o.profile);
  if (o.samples_per_step > 0)
    for (auto& s : profile.steps) s.samples = static_cast<int64_t>(o.samples_per_step);
  plan::NetworkModel network = plan::resolve_network(o.networks);
  plan::Scenario s;
  s.topology.ranks_per_node = o.ranks_per_node;
  s.topology.cross = o.cross.empty() ? default_cross(network) : o.cross;
  s.topology.hierarchical = o.hierarchical;
  s.fusion_threshold = static_cast<int64_t>(parse_bytes(o.fusion, "--fusion"));
  s.overlap = o.overlap;
  s.compression = o.compression;
  s.jitter_ms = o.jitter_ms;
  s.cores_per_node = o.cores_per_node;
  s.threads_per_rank = o.threads_per_rank;
  s.colocated_slowdown = o.compute_slowdown;
  s.wake_wait_ms = o.wake_wait_ms;
  const std::vector<int> nodes = parse_int_list(o.nodes, "--nodes");
  const plan::ProfileSummary sum = plan::summarize(profile);
  if (!o.json) {
    fmt::print(
        "# lockstep plan: {} ({} gradients, {:.1f} MiB, {:.2f} ms/step at 1 rank, {:.0f} "
        "samples/step)\n",
        o.profile, sum.gradient_count, sum.gradient_bytes / 1048576.0, sum.compute_ms,
        sum.samples_per_step);
    fmt::print("# network: {}{}\n", network.name,
               network.preset ? " [PRESET: published figures, "
                                "not measured here]"
                              : "");
    if (!network.description.empty()) fmt::print("#   {}\n", network.description);
    fmt::print(
        "# {} rank(s)/node, cross={}, hierarchical={}, fusion={}, overlap={}, "
        "compression={}\n",
        o.ranks_per_node, s.topology.cross, o.hierarchical, o.fusion, o.overlap, o.compression);
    fmt::print("{}\n", prediction_header());
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<plan::StepPrediction> out;
  for (int n : nodes) {
    s.topology.nodes = n;
    out.push_back(plan::simulate(profile, network, s));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& p : out)
    fmt::print("{}\n", o.json ? prediction_json(p, network.name) : prediction_row(p));
  if (!o.json)
    fmt::print(
        "# simulated {} scale(s) in {:.1f} ms; efficiency = throughput / (ranks x one "
        "rank's throughput)\n",
        nodes.size(), ms);
  return 0;
}

}  // namespace

int predict_main(int argc, char** argv) {
  CLI::App app{"Predict step time and scaling efficiency of a profiled model (docs/plan.md)",
               "lockstep plan"};
  PredictOptions o;
  add_options(app, o);
  return cli::run_command(app, argc, argv, "lockstep plan", [&] { return run(o); });
}

}  // namespace lockstep::plan_tool
