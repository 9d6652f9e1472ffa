// lockstep-bench-train (`lockstep bench train`): training samples/s of the
// main job's step (FashionCnn + Adam, synthetic batches) for every layout of
// workers x threads that fits the host, against plain LibTorch, interleaved
// over rounds, medians, with ratios. Variants (each its own process(es)):
//   plain 1x1, plain 1x1 tuned    plain LibTorch, 1 thread; "tuned" = only
//                                 lockstep's malloc thresholds (tune_malloc)
//   plain 1xC, plain 1xC tuned    one process using all C CPUs
//   lockstep 1x1                  one lockstep worker, 1 thread, no launcher
//   per layout NxT (N*T = C):
//     ceiling NxT                 N independent tuned plain 1xT processes at
//                                 once, no communication: what these CPUs
//                                 give N processes at all
//     lockstep NxT                `lockstep run -np N --threads-per-worker T`
//                                 (N = 1: the program alone, T threads)
// Prints a table, the ratios the goals of docs/performance.md name, and one
// JSON line per variant and per ratio; then the planner's predicted
// samples/s beside the measured per layout and whether the layout it
// recommends is the measured fastest (predict.h; before the rounds it
// records a profile of lockstep 1x1 and, without --network, fits the shm
// costs with a short `lockstep bench fit`).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "lockstep/base/executable.h"
#include "lockstep/base/knobs.h"
#include "lockstep/plan/layouts.h"
#include "tools/bench_train/predict.h"
#include "tools/bench_train/worker.h"

namespace bt = lockstep::bench_train;

namespace {

struct Options {
  bt::WorkerConfig worker;
  int cpus = 0;         // 0: the CPUs this process may use
  std::string layouts;  // "1x2,2x1"; empty: every NxT with N*T = cpus
  int rounds = 3;
  bool overlap_variants = false;
  std::string json;
  std::string network;  // shm fit for the planner; empty: fitted here
  bool predict = true;
  bool worker_mode = false;
};

using lockstep::plan::Layout;

struct Variant {
  std::string label;
  std::string command;
  std::vector<double> samples_per_s;   // one per round that succeeded
  std::optional<nlohmann::json> last;  // the last round's JSON
};

int allowed_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

std::vector<Layout> parse_layouts(const Options& o, int cpus) {
  if (!o.layouts.empty()) return lockstep::plan::parse_layouts(o.layouts, "--layouts");
  std::vector<Layout> out;
  for (int n = 1; n <= cpus; ++n)
    if (cpus % n == 0) out.push_back({n, cpus / n});
  return out;
}

std::string worker_args(const Options& o, const std::string& variant, int threads) {
  const auto& w = o.worker;
  return fmt::format(
      "--worker --variant {} --threads {} --batch-size {} --warmup-steps {} "
      "--window-steps {} --windows {} --device {} --strategy {}",
      variant, threads, w.batch_size, w.warmup_steps, w.window_steps, w.windows, w.device,
      w.strategy);
}

// `lockstep run` when it is there; else the same environment by hand.
std::string multi_worker_command(const Options& o, Layout l, const std::string& overlap) {
  const std::string self = lockstep::executable_path();
  const auto launcher = std::filesystem::path(self).parent_path() / "lockstep";
  const std::string args = worker_args(o, "lockstep", 0);
  if (std::filesystem::exists(launcher))
    return fmt::format("'{}' run -np {} --threads-per-worker {} --overlap {} '{}' {}",
                       launcher.string(), l.workers, l.threads, overlap, self, args);
  std::string job = fmt::format("bench-train-{}", getpid());
  std::string cmd;
  for (int r = 0; r < l.workers; ++r)
    cmd += fmt::format(
        "LOCKSTEP_RANK={0} LOCKSTEP_SIZE={1} LOCKSTEP_LOCAL_RANK={0} "
        "LOCKSTEP_LOCAL_SIZE={1} LOCKSTEP_JOB_ID={2} LOCKSTEP_OVERLAP={5} "
        "LOCKSTEP_INTRA_OP_THREADS={6} '{3}' {4} & ",
        r, l.workers, job, self, args, overlap, l.threads);
  return cmd + "wait";
}

// N copies of one command at the same time (the ceiling variants).
std::string concurrent_command(const std::string& one, int n) {
  std::string cmd;
  for (int i = 0; i < n; ++i) cmd += one + " & ";
  return cmd + "wait";
}

// Runs `command` and returns the JSON object it prints (only rank 0 of a
// lockstep job prints); independent processes each print one, and their
// samples/s add up.
std::optional<nlohmann::json> run_variant(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return std::nullopt;
  std::optional<nlohmann::json> result;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe)) {
    const char* text = std::strchr(line, '{');  // the launcher prefixes "[rank]: "
    if (!text) continue;
    auto json = nlohmann::json::parse(text, nullptr, false);
    if (json.is_discarded() || !json.contains("samples_per_s")) continue;
    if (!result) {
      result = json;
    } else {
      (*result)["samples_per_s"] =
          (*result)["samples_per_s"].get<double>() + json["samples_per_s"].get<double>();
      (*result)["processes"] = (*result).value("processes", 1) + 1;
    }
  }
  int status = pclose(pipe);
  if (status != 0 || !result) return std::nullopt;
  return result;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

class Table {
 public:
  // Adds a variant; returns its label (the key for ratios).
  std::string add(std::string label, std::string command) {
    variants_.push_back({label, std::move(command), {}, {}});
    return label;
  }
  void run(int rounds) {
    for (int round = 0; round < rounds; ++round)
      for (auto& v : variants_) {
        fmt::print(stderr, "round {}/{}: {}\n", round + 1, rounds, v.label);
        if (auto r = run_variant(v.command)) {
          v.samples_per_s.push_back((*r)["samples_per_s"].get<double>());
          v.last = r;
        } else {
          fmt::print(stderr, "  {} failed (rerun its command to see why): {}\n", v.label,
                     v.command);
        }
      }
  }
  // Median samples/s; 0 when every round failed.
  double median_of(const std::string& label) const {
    for (const auto& v : variants_)
      if (v.label == label) return median(v.samples_per_s);
    return 0;
  }
  void print(FILE* json, double base) const {
    fmt::print("{:<32} {:>10} {:>8} {:>9} {:>10}  {}\n", "variant (workers x threads)", "samples/s",
               "vs 1x1t", "step ms", "comm wait", "rounds");
    for (const auto& v : variants_) {
      const double sps = median(v.samples_per_s);
      if (!v.last) {
        fmt::print("{:<32} {:>10}\n", v.label, "failed");
        continue;
      }
      std::string rounds;
      for (double s : v.samples_per_s) rounds += fmt::format("{:.0f} ", s);
      fmt::print("{:<32} {:>10.0f} {:>7.2f}x {:>9.2f} {:>9.1f}%  {}\n", v.label, sps,
                 base > 0 ? sps / base : 0, v.last->value("step_ms", 0.0),
                 100 * v.last->value("comm_wait_share", 0.0), rounds);
      nlohmann::json j = *v.last;
      j["label"] = v.label;
      j["samples_per_s"] = sps;
      j["rounds"] = v.samples_per_s;
      emit(json, j);
    }
  }
  static void emit(FILE* json, const nlohmann::json& j) {
    std::printf("%s\n", j.dump().c_str());
    if (json) std::fprintf(json, "%s\n", j.dump().c_str());
  }

 private:
  std::vector<Variant> variants_;
};

struct Ratio {
  std::string what;
  double value;
  double goal;  // 0: none
};

// The labels of the variants every run has, and per layout.
struct Labels {
  std::string plain11, plain11t, plain1c, plain1ct, lockstep11;
  std::map<std::string, std::pair<std::string, std::string>> per_layout;  // ceiling, lockstep
};

Labels add_variants(Table& t, const Options& o, const std::vector<Layout>& layouts, int cpus) {
  const std::string self = "'" + lockstep::executable_path() + "' ";
  Labels b;
  b.plain11 = t.add("plain 1x1", self + worker_args(o, "plain", 1));
  b.plain11t = t.add("plain 1x1 tuned", self + worker_args(o, "plain-malloc", 1));
  b.plain1c = t.add(fmt::format("plain 1x{}", cpus), self + worker_args(o, "plain", cpus));
  b.plain1ct =
      t.add(fmt::format("plain 1x{} tuned", cpus), self + worker_args(o, "plain-malloc", cpus));
  b.lockstep11 =
      t.add("lockstep 1x1", "LOCKSTEP_INTRA_OP_THREADS=1 " + self + worker_args(o, "lockstep", 0));
  for (const Layout& l : layouts) {
    std::string ceiling, lockstep;
    if (l.workers > 1)
      ceiling =
          t.add(fmt::format("ceiling {} (independent)", l.name()),
                concurrent_command(self + worker_args(o, "plain-malloc", l.threads), l.workers));
    if (l.workers == 1 && l.threads == 1) {
      lockstep = b.lockstep11;
    } else if (l.workers == 1) {
      lockstep = t.add(fmt::format("lockstep {}", l.name()),
                       fmt::format("LOCKSTEP_INTRA_OP_THREADS={} ", l.threads) + self +
                           worker_args(o, "lockstep", 0));
    } else {
      lockstep = t.add(fmt::format("lockstep {}", l.name()), multi_worker_command(o, l, "auto"));
      if (o.overlap_variants)
        t.add(fmt::format("lockstep {}, overlap on", l.name()), multi_worker_command(o, l, "on"));
    }
    b.per_layout[l.name()] = {ceiling, lockstep};
  }
  return b;
}

// Prints the ratios and the fastest layout; returns its samples/s (0: none ran).
double print_ratios(const Table& t, const Labels& b, const std::vector<Layout>& layouts, int cpus,
                    FILE* json) {
  const double base = t.median_of(b.plain11t);
  const double best_plain_c = std::max(t.median_of(b.plain1c), t.median_of(b.plain1ct));
  std::vector<Ratio> ratios;
  if (base > 0)
    ratios.push_back({"lockstep 1x1 / plain 1x1 tuned", t.median_of(b.lockstep11) / base, 0.98});
  Layout best_layout;
  double best = 0;
  for (const Layout& l : layouts) {
    const auto& [ceiling, lockstep] = b.per_layout.at(l.name());
    const double sps = t.median_of(lockstep);
    if (sps > best) best = sps, best_layout = l;
    if (!ceiling.empty() && t.median_of(ceiling) > 0)
      ratios.push_back({fmt::format("lockstep {} / ceiling {}", l.name(), l.name()),
                        sps / t.median_of(ceiling), l.threads == 1 ? 0.97 : 0});
    if (best_plain_c > 0)
      ratios.push_back({fmt::format("lockstep {} / best plain 1x{}", l.name(), cpus),
                        sps / best_plain_c, l.workers > 1 && l.threads == 1 ? 1.05 : 0});
  }
  fmt::print("\n");
  for (const Ratio& r : ratios) {
    fmt::print("{:<44} {:6.3f}{}\n", r.what, r.value,
               r.goal > 0
                   ? fmt::format("   goal >= {:.2f}{}", r.goal, r.value >= r.goal ? "" : "  MISSED")
                   : "");
    Table::emit(json, {{"ratio", r.what}, {"value", r.value}, {"goal", r.goal}});
  }
  if (best > 0)
    fmt::print("fastest layout on {} CPUs: {} workers x {} threads ({:.0f} samples/s)\n", cpus,
               best_layout.workers, best_layout.threads, best);
  return best;
}

// What the planner needs that the rounds do not measure: a profile of
// lockstep 1x1 and the shm costs (predict.h).
struct PlannerInputs {
  std::optional<lockstep::plan::Profile> profile;
  std::optional<lockstep::plan::NetworkModel> network;
};

PlannerInputs prepare_planner(const Options& o, const std::vector<Layout>& layouts,
                              const std::string& base) {
  if (!o.predict) return {};
  if (o.worker.strategy != "data" || o.worker.device != "cpu") {
    fmt::print(stderr,
               "bench train: no prediction: the planner's layouts model data parallelism "
               "on CPUs (--strategy data --device cpu)\n");
    return {};
  }
  const std::string profile = base + ".profile.json";
  fmt::print(stderr, "bench train: recording a profile of lockstep 1x1 for the planner\n");
  PlannerInputs in;
  in.profile = bt::record_profile(
      fmt::format("LOCKSTEP_INTRA_OP_THREADS=1 LOCKSTEP_PROFILE='{}' LOCKSTEP_PROFILE_WARMUP={} "
                  "LOCKSTEP_PROFILE_STEPS={} '{}' {}",
                  profile, o.worker.warmup_steps, std::max(1, o.worker.window_steps),
                  lockstep::executable_path(), worker_args(o, "lockstep", 0)),
      profile);
  std::vector<int> counts;
  for (const Layout& l : layouts) counts.push_back(l.workers);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  if (in.profile) in.network = bt::shm_network(o.network, counts, base + ".shm.json");
  std::filesystem::remove(profile);
  std::filesystem::remove(base + ".shm.json");
  return in;
}

bt::Measured measured(const Table& t, const Labels& b, const Options& o,
                      const std::vector<Layout>& layouts, int cpus) {
  bt::Measured m;
  m.cpus = cpus;
  m.batch_size = o.worker.batch_size;
  m.plain_1x1 = t.median_of(b.plain11t);
  m.plain_1xc = t.median_of(b.plain1ct);
  m.lockstep_1x1 = t.median_of(b.lockstep11);
  const auto all = b.per_layout.find(fmt::format("{}x1", cpus));
  if (all != b.per_layout.end() && !all->second.first.empty())
    m.ceiling_cx1 = t.median_of(all->second.first);
  for (const Layout& l : layouts)
    if (const double sps = t.median_of(b.per_layout.at(l.name()).second); sps > 0)
      m.layouts.push_back({l, sps});
  return m;
}

int orchestrate(const Options& o) {
  const int cpus = o.cpus > 0 ? o.cpus : allowed_cpu_count();
  const std::vector<Layout> layouts = parse_layouts(o, cpus);
  const PlannerInputs planner =
      prepare_planner(o, layouts,
                      fmt::format("{}/lockstep-bench-train-{}",
                                  std::filesystem::temp_directory_path().string(), getpid()));
  Table t;
  const Labels b = add_variants(t, o, layouts, cpus);
  t.run(o.rounds);

  FILE* json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "a");
  t.print(json, t.median_of(b.plain11t));
  const double best = print_ratios(t, b, layouts, cpus, json);
  if (planner.profile && planner.network) {
    try {
      bt::print_predictions(measured(t, b, o, layouts, cpus), *planner.profile, *planner.network,
                            json);
    } catch (const std::exception& e) {
      fmt::print(stderr, "bench train: no prediction: {}\n", e.what());
    }
  }
  if (json) std::fclose(json);
  return best > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Training throughput: plain LibTorch vs lockstep, every workers x threads layout"};
  Options o;
  app.add_option("--cpus", o.cpus, "CPUs the layouts fill (default: those this process may use)");
  app.add_option("--layouts", o.layouts, "WORKERSxTHREADS,... (default: every N x T = CPUs)");
  app.add_option("--batch-size", o.worker.batch_size, "per worker")->capture_default_str();
  app.add_option("--device", o.worker.device,
                 "cpu, or cuda: plain LibTorch on GPU 0, lockstep workers on their placement's "
                 "GPU (workers beyond the GPUs share them)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--warmup-steps", o.worker.warmup_steps)->capture_default_str();
  app.add_option("--window-steps", o.worker.window_steps, "steps per timed window")
      ->capture_default_str();
  app.add_option("--windows", o.worker.windows, "timed windows (the median counts)")
      ->capture_default_str();
  app.add_option("--rounds", o.rounds, "interleaved passes over all variants (medians reported)")
      ->capture_default_str();
  app.add_flag("--overlap-variants", o.overlap_variants,
               "also time each multi-worker layout with --overlap on");
  app.add_option("--json", o.json, "append the JSON lines to FILE");
  app.add_option("--network", o.network,
                 "`lockstep bench fit --backend shm` file for the planner's prediction (default: "
                 "a short fit at the layouts' worker counts before the rounds)");
  app.add_flag("!--no-predict", o.predict,
               "skip the planner's prediction (and the profile and fit it needs)");
  app.add_flag("--worker", o.worker_mode, "internal: run one variant");
  app.add_option("--variant", o.worker.variant, "internal: plain|plain-malloc|lockstep");
  app.add_option("--strategy", o.worker.strategy,
                 "lockstep variants: data (DistributedOptimizer), fsdp (FullyShardedModel) "
                 "or same-bits (SameBitsStep, 8 micro-batches of the global batch)")
      ->check(CLI::IsMember({"data", "fsdp", "same-bits"}))
      ->capture_default_str();
  app.add_option("--threads", o.worker.threads, "internal: intra-op threads (0: placement)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!o.worker_mode) return orchestrate(o);
    bt::WorkerResult r = bt::run_worker(o.worker);
    if (lockstep::knob_int("LOCKSTEP_RANK") == 0) {
      nlohmann::json line{{"variant", o.worker.variant}, {"workers", r.workers},
                          {"threads", r.threads},        {"samples_per_s", r.samples_per_s},
                          {"step_ms", r.step_ms},        {"comm_wait_share", r.comm_wait_share}};
      if (o.worker.variant == "lockstep") line["strategy"] = o.worker.strategy;
      std::printf("%s\n", line.dump().c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-bench-train: error: {}\n", e.what());
    return 1;
  }
}
