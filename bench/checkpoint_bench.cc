// lockstep-checkpoint-bench: what a checkpoint costs training, on a model of
// --mb MB of parameters + Adam's two moments (3x that written per save).
// Run under the launcher: `lockstep run -np 2 lockstep-checkpoint-bench`.
// Variants, interleaved in every round (same model, same state):
//   rank-0 file    lockstep::torch::save_checkpoint: rank 0 writes one archive
//   sharded sync   CheckpointWriter: every rank writes its share, manifest last
//   sharded async  CheckpointWriter{.async}: the pause is until save() returns;
//                  "async total" is until wait() returns (the write behind it)
// Each time is from a barrier to the return on every rank (the slowest rank's,
// through a max-allreduce). Prints a table of medians, the ratios
// docs/performance.md quotes, and one JSON line per variant and per ratio.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/torch/torch.h"

namespace {

namespace fs = std::filesystem;
namespace lt = lockstep::torch;
namespace lp = lockstep::parallel;
using Clock = std::chrono::steady_clock;

double slowest(double seconds, const std::string& name) {
  auto t = ::torch::tensor({seconds}, ::torch::kFloat64);
  lt::allreduce_(t, name, {.op = lockstep::comm::ReduceOp::kMax});
  return t.item<double>();
}

template <class F>
double timed(const std::string& name, F&& body) {
  lt::barrier();
  const auto start = Clock::now();
  body();
  return slowest(std::chrono::duration<double>(Clock::now() - start).count(), name);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int mb = 128, rounds = 5;
  std::string dir = (fs::temp_directory_path() / "lockstep-checkpoint-bench").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mb") mb = std::atoi(argv[i + 1]);
    else if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (flag == "--dir") dir = argv[i + 1];
  }
  lt::init();
  const int rank = lt::rank(), size = lt::size();
  // Layers of 1024 x 1024 floats (4 MiB each) up to --mb MB of parameters.
  ::torch::nn::Sequential model;
  const int layers = std::max(1, static_cast<int>(mb * 1e6 / (1024.0 * 1024 * 4)));
  for (int l = 0; l < layers; ++l) model->push_back(::torch::nn::Linear(1024, 1024));
  ::torch::optim::Adam adam(model->parameters(), 1e-3);
  model->forward(::torch::randn({4, 1024})).sum().backward();
  adam.step();  // creates the moments
  const std::string root = fmt::format("{}-{}", dir, size);
  if (rank == 0) fs::remove_all(root);
  lt::barrier();
  lp::CheckpointWriter sync(root + "/sync", {.keep_last = 1});
  lp::CheckpointWriter async(root + "/async", {.keep_last = 1, .async = true});
  std::map<std::string, std::vector<double>> times;
  for (int r = 0; r < rounds; ++r) {
    const lt::TrainingProgress progress{.epoch = 0, .step = r, .sampler = {}, .user = {}};
    std::vector<std::function<void()>> variants = {
        [&] {
          times["rank-0 file"].push_back(timed(fmt::format("t.file.{}", r), [&] {
            lt::save_checkpoint(root + "/file.pt", *model, adam, progress);
          }));
        },
        [&] {
          times["sharded sync"].push_back(
              timed(fmt::format("t.sync.{}", r), [&] { sync.save(*model, adam, progress); }));
        },
        [&] {
          double pause = 0;
          times["async total"].push_back(timed(fmt::format("t.total.{}", r), [&] {
            pause = timed(fmt::format("t.pause.{}", r), [&] { async.save(*model, adam, progress); });
            async.wait();
          }));
          times["async pause"].push_back(pause);
        }};
    // Interleaved, in a rotated order each round (the page cache and disk see each first).
    std::rotate(variants.begin(), variants.begin() + r % variants.size(), variants.end());
    for (auto& run : variants) run();
  }
  if (rank == 0) {
    const double bytes = 3.0 * layers * (1024.0 * 1024 + 1024) * 4;
    fmt::print("checkpoint of {:.0f} MB ({} layers + Adam), {} rank(s), {} rounds, medians:\n",
               bytes / 1e6, layers, size, rounds);
    fmt::print("  {:<14} {:>9} {:>9}\n", "variant", "seconds", "GB/s");
    for (const char* v : {"rank-0 file", "sharded sync", "async pause", "async total"}) {
      const double m = median(times[v]);
      fmt::print("  {:<14} {:>9.3f} {:>9.2f}\n", v, m, bytes / m / 1e9);
      fmt::print("{}\n", nlohmann::json{{"bench", "checkpoint"}, {"variant", v}, {"ranks", size},
                                        {"bytes", bytes}, {"median_s", m}, {"rounds_s", times[v]}}
                             .dump());
    }
    const std::vector<std::pair<std::string, std::pair<std::string, std::string>>> ratios = {
        {"sharded sync / rank-0 file", {"sharded sync", "rank-0 file"}},
        {"async pause / sharded sync", {"async pause", "sharded sync"}},
        {"async pause / rank-0 file", {"async pause", "rank-0 file"}}};
    for (const auto& [label, ab] : ratios) {
      const double ratio = median(times[ab.first]) / median(times[ab.second]);
      fmt::print("  {:<28} {:.3f}x\n", label, ratio);
      fmt::print("{}\n", nlohmann::json{{"bench", "checkpoint"}, {"ratio", label}, {"ranks", size},
                                        {"value", ratio}}.dump());
    }
    fs::remove_all(root);
  }
  lt::shutdown();
  return 0;
}
