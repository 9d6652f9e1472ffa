// lockstep-bench-train (`lockstep bench train`): training samples/s of
//   (a)  plain LibTorch, 1 process, 1 intra-op thread, no lockstep,
//   (a2) plain LibTorch, 1 process, N threads,
//   (a3) plain LibTorch, 1 thread, with lockstep's malloc thresholds only
//        (separates that effect from the rest),
//   (b)  lockstep, 1 worker, 1 thread,
//   (c)  lockstep, N workers (via `lockstep run -np N`, or a direct spawn with
//        the same LOCKSTEP_* environment when the launcher is not built), with
//        LOCKSTEP_OVERLAP=on and with the default (auto),
//   (d)  N independent plain 1x1 + malloc processes at once, no communication:
//        their summed samples/s is what these cores deliver to N processes at
//        all (shared caches, memory bandwidth, clock), the ceiling for (c),
// each variant on its own, one after the other, so they use the same cores.
// Prints a table, the scaling efficiency (c) / (N * (a)) and the share of step
// time spent waiting for gradients, and one JSON line per variant.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "lockstep/base/knobs.h"
#include "worker.h"

namespace bt = lockstep::bench_train;

namespace {

struct Options {
  bt::WorkerConfig worker;
  int np = 2;
  int rounds = 2;
  std::string json;
  bool worker_mode = false;
};

std::string self_path() { return std::filesystem::canonical("/proc/self/exe").string(); }

std::string worker_args(const Options& o, const std::string& variant, int threads) {
  const auto& w = o.worker;
  return fmt::format("--worker --variant {} --threads {} --batch-size {} --warmup-steps {} "
                     "--window-steps {} --windows {}",
                     variant, threads, w.batch_size, w.warmup_steps, w.window_steps, w.windows);
}

// The launcher when it is there; else the same environment by hand.
std::string multi_worker_command(const Options& o, const std::string& overlap) {
  const std::string self = self_path();
  const auto launcher = std::filesystem::path(self).parent_path() / "lockstep";
  const std::string args = worker_args(o, "lockstep", 0);
  if (std::filesystem::exists(launcher))
    return fmt::format("'{}' run -np {} --overlap {} '{}' {}", launcher.string(), o.np, overlap,
                       self, args);
  std::string job = fmt::format("bench-train-{}", getpid());
  std::string cmd;
  for (int r = 0; r < o.np; ++r)
    cmd += fmt::format("LOCKSTEP_RANK={0} LOCKSTEP_SIZE={1} LOCKSTEP_LOCAL_RANK={0} "
                       "LOCKSTEP_LOCAL_SIZE={1} LOCKSTEP_JOB_ID={2} LOCKSTEP_OVERLAP={5} "
                       "'{3}' {4} & ",
                       r, o.np, job, self, args, overlap);
  return cmd + "wait";
}

// N copies of one worker at the same time, for variant (d).
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
    if (json.is_discarded()) continue;
    if (!result) {
      result = json;
    } else {
      (*result)["samples_per_s"] =
          (*result)["samples_per_s"].get<double>() + json["samples_per_s"].get<double>();
      (*result)["processes"] = (*result).value("processes", 1) + 1;
    }
  }
  int status = pclose(pipe);
  if (status != 0 || !result || result->is_discarded()) return std::nullopt;
  return result;
}

int orchestrate(const Options& o) {
  const std::string self = "'" + self_path() + "' ";
  struct Variant {
    std::string label, command;
  };
  std::vector<Variant> variants = {
      {"plain 1 proc x 1 thread", self + worker_args(o, "plain", 1)},
      {fmt::format("plain 1 proc x {} threads", o.np), self + worker_args(o, "plain", o.np)},
      {"plain 1x1 + malloc tuning", self + worker_args(o, "plain-malloc", 1)},
      // The fair baseline for N workers: one process using all N cores, with
      // the same allocator settings lockstep applies.
      {fmt::format("plain 1x{} + malloc tuning", o.np), self + worker_args(o, "plain-malloc", o.np)},
      {"lockstep 1 worker x 1 thread", self + worker_args(o, "lockstep", 1)},
      {fmt::format("{} x plain 1x1 + malloc, no comm", o.np),
       concurrent_command(self + worker_args(o, "plain-malloc", 1), o.np)},
      {fmt::format("lockstep {} workers, overlap on", o.np), multi_worker_command(o, "on")},
      {fmt::format("lockstep {} workers", o.np), multi_worker_command(o, "auto")},
  };
  // Rounds interleave the variants so a burst of load elsewhere hits them
  // alike; each variant keeps its best round.
  std::vector<std::optional<nlohmann::json>> results(variants.size());
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t i = 0; i < variants.size(); ++i) {
      fmt::print(stderr, "round {}/{}: {}\n", round + 1, o.rounds, variants[i].label);
      auto r = run_variant(variants[i].command);
      if (r && (!results[i] || (*r)["samples_per_s"].get<double>() >
                                   (*results[i])["samples_per_s"].get<double>()))
        results[i] = r;
    }
  }
  const double base = results[0] ? (*results[0])["samples_per_s"].get<double>() : 0;
  fmt::print("{:<32} {:>12} {:>10} {:>10} {:>12}\n", "variant", "samples/s", "vs (a)", "step ms",
             "comm wait");
  FILE* json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "a");
  for (size_t i = 0; i < variants.size(); ++i) {
    if (!results[i]) {
      fmt::print("{:<32} {:>12}\n", variants[i].label, "failed");
      continue;
    }
    auto& r = *results[i];
    const double sps = r["samples_per_s"].get<double>();
    fmt::print("{:<32} {:>12.0f} {:>9.2f}x {:>10.2f} {:>11.1f}%\n", variants[i].label, sps,
               base > 0 ? sps / base : 0, r["step_ms"].get<double>(),
               100 * r["comm_wait_share"].get<double>());
    r["label"] = variants[i].label;
    r["speedup_vs_plain_1x1"] = base > 0 ? sps / base : 0;
    if (json) std::fprintf(json, "%s\n", r.dump().c_str());
    std::printf("%s\n", r.dump().c_str());
  }
  const auto& multi = results.back();
  const auto& single = results[4];
  const auto& ceiling = results[5];
  const auto& plain_n_tuned = results[3];
  if (multi && base > 0)
    fmt::print("scaling efficiency, {} workers vs {} x plain 1x1: {:.1f}%\n", o.np, o.np,
               100 * (*multi)["samples_per_s"].get<double>() / (o.np * base));
  if (multi && single)
    fmt::print("scaling efficiency, {} workers vs {} x lockstep 1 worker: {:.1f}%\n", o.np, o.np,
               100 * (*multi)["samples_per_s"].get<double>() /
                   (o.np * (*single)["samples_per_s"].get<double>()));
  if (multi && plain_n_tuned)
    fmt::print("{} workers vs plain 1x{} + malloc tuning (same cores): {:.2f}x\n", o.np, o.np,
               (*multi)["samples_per_s"].get<double>() /
                   (*plain_n_tuned)["samples_per_s"].get<double>());
  if (multi && ceiling)
    fmt::print("{} workers vs {} independent plain 1x1 processes (hardware ceiling): {:.1f}%\n",
               o.np, o.np,
               100 * (*multi)["samples_per_s"].get<double>() /
                   (*ceiling)["samples_per_s"].get<double>());
  if (json) std::fclose(json);
  return multi ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Training throughput: plain LibTorch vs lockstep workers"};
  Options o;
  app.add_option("--np", o.np, "workers for variant (c), and threads for (a2)")->capture_default_str();
  app.add_option("--batch-size", o.worker.batch_size, "per worker")->capture_default_str();
  app.add_option("--warmup-steps", o.worker.warmup_steps)->capture_default_str();
  app.add_option("--window-steps", o.worker.window_steps, "steps per timed window")
      ->capture_default_str();
  app.add_option("--windows", o.worker.windows, "timed windows (the median counts)")
      ->capture_default_str();
  app.add_option("--rounds", o.rounds, "passes over all variants (best kept)")
      ->capture_default_str();
  app.add_option("--json", o.json, "append the JSON lines to FILE");
  app.add_flag("--worker", o.worker_mode, "internal: run one variant");
  app.add_option("--variant", o.worker.variant, "internal: plain|plain-malloc|lockstep");
  app.add_option("--threads", o.worker.threads, "internal: intra-op threads (0: placement)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!o.worker_mode) return orchestrate(o);
    bt::WorkerResult r = bt::run_worker(o.worker);
    if (lockstep::knob_int("LOCKSTEP_RANK") == 0)
      std::printf("%s\n", nlohmann::json{{"variant", o.worker.variant},
                                         {"workers", r.workers},
                                         {"threads", r.threads},
                                         {"samples_per_s", r.samples_per_s},
                                         {"step_ms", r.step_ms},
                                         {"comm_wait_share", r.comm_wait_share}}
                              .dump()
                              .c_str());
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-bench-train: error: {}\n", e.what());
    return 1;
  }
}
