// lockstep-fsdp-checkpoint-bench: what a checkpoint-directory save of a
// FullyShardedModel costs in time and in memory, routed (each rank's
// segments straight to the ranks that write them; Note [Routed checkpoint
// saves] in src/parallel/checkpoint_dir_routed_save.cc) against the full view
// (every rank gathers the whole model and optimizer state, then the
// data-parallel save), on a Sequential of Linear layers of --mb MB of
// parameters + Adam's two moments. Both write the same bytes.
// Run under the launcher: `lockstep run -np 2 lockstep-fsdp-checkpoint-bench`.
// The variants alternate in every round. Time is from a barrier to the
// return on every rank (the slowest rank's); memory is the growth of this
// process's peak resident set during the save over its resident set before
// (VmHWM reset through /proc/self/clear_refs), the largest over the ranks.
// Prints a table of medians, the ratios, and one JSON line per variant and
// per ratio.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/torch/objects.h"
#include "lockstep/torch/torch.h"

namespace {

namespace fs = std::filesystem;
namespace lt = lockstep::torch;
namespace lp = lockstep::parallel;
using Clock = std::chrono::steady_clock;

double max_over_ranks(double v, const std::string& name) {
  auto t = ::torch::tensor({v}, ::torch::kFloat64);
  lt::allreduce_(t, name, {.op = lockstep::comm::ReduceOp::kMax});
  return t.item<double>();
}

// kB of a /proc/self/status field ("VmRSS", "VmHWM").
double status_kb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1));
  return 0;
}

void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Sample {
  double seconds = 0, peak_mb = 0;
};

template <class F>
Sample measure(const std::string& name, F&& save) {
  lt::barrier();
  const double before = status_kb("VmRSS");
  reset_peak();
  const auto start = Clock::now();
  save();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double grown = std::max(0.0, status_kb("VmHWM") - before) / 1024;
  return {max_over_ranks(seconds, name + ".t"), max_over_ranks(grown, name + ".m")};
}

int parse_int(int argc, char** argv, const std::string& flag, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == flag) return std::stoi(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  lt::init();
  const int mb = parse_int(argc, argv, "--mb", 128), rounds = parse_int(argc, argv, "--rounds", 3);
  // Square layers of 1024x1024 floats (4 MB each) make up --mb MB.
  const int64_t width = 1024, layers = std::max(1, mb / 4);
  ::torch::manual_seed(1);
  ::torch::nn::Sequential model;
  for (int64_t i = 0; i < layers; ++i) model->push_back(::torch::nn::Linear(width, width));
  lp::FullyShardedModel fsdp(model, {.layers_per_unit = 4, .name = "bench"});
  ::torch::optim::Adam adam(fsdp.parameters(), 1e-4);
  fsdp.forward(::torch::randn({4, width})).sum().backward();
  fsdp.step(adam);  // the moments exist
  const fs::path root = fs::temp_directory_path() / fmt::format("lockstep-fsdp-ckpt-bench-{}",
                                                                lt::rank() == 0 ? ::getpid() : 0);
  std::string dir = root.string();
  dir = lt::broadcast_bytes(dir, 0, "bench.dir");
  std::map<std::string, std::vector<Sample>> samples;
  const std::vector<std::string> order = {"routed", "full view"};
  for (int r = 0; r < rounds; ++r) {
    for (const std::string& v : order) {
      if (lt::rank() == 0) fs::remove_all(dir);
      lt::barrier();
      lp::CheckpointWriter writer(dir + "/" + (v == "routed" ? "a" : "b"));
      const lt::TrainingProgress progress{.epoch = 0, .step = r, .sampler = {}, .user = {}};
      Sample s = measure(fmt::format("bench.{}.{}", v == "routed" ? "a" : "b", r), [&] {
        if (v == "routed") {
          writer.save(fsdp, adam, progress);
        } else {
          fsdp.with_full_view(adam, /*keep_changes=*/false,
                              [&] { writer.save(fsdp.wrapped(), adam, progress); });
        }
      });
      samples[v].push_back(s);
      if (lt::rank() == 0)
        fmt::print("round {} {:10s} {:7.3f} s  peak +{:7.1f} MB\n", r, v, s.seconds, s.peak_mb);
    }
  }
  if (lt::rank() == 0) fs::remove_all(dir);
  if (lt::rank() == 0) {
    auto med = [&](const std::string& v, bool memory) {
      std::vector<double> x;
      for (const Sample& s : samples[v]) x.push_back(memory ? s.peak_mb : s.seconds);
      return median(x);
    };
    fmt::print(
        "\nFSDP checkpoint-directory save, {} MB of parameters (+ Adam), {} ranks, {} rounds\n",
        layers * 4, lt::size(), rounds);
    fmt::print("| variant | seconds | peak growth (MB, max rank) |\n|---|---|---|\n");
    for (const std::string& v : order)
      fmt::print("| {} | {:.3f} | {:.1f} |\n", v, med(v, false), med(v, true));
    const double t = med("routed", false) / med("full view", false);
    const double m = med("routed", true) / std::max(1e-9, med("full view", true));
    fmt::print("routed / full view: time {:.2f}x, peak memory growth {:.2f}x\n", t, m);
    for (const std::string& v : order)
      fmt::print("{}\n", nlohmann::json{{"bench", "fsdp_checkpoint"},
                                        {"variant", v},
                                        {"ranks", lt::size()},
                                        {"mb", layers * 4},
                                        {"seconds", med(v, false)},
                                        {"peak_mb", med(v, true)}}
                             .dump());
    fmt::print("{}\n", nlohmann::json{{"bench", "fsdp_checkpoint"},
                                      {"ratio", "routed/full view"},
                                      {"time", t},
                                      {"peak_memory", m}}
                           .dump());
  }
  lt::shutdown();
  return 0;
}
