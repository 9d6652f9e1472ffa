// lockstep-checkpoint-bench: what a checkpoint costs training, on a model of
// --mb MB of parameters + Adam's two moments (3x that written per save), or,
// with --model fashion-cnn, on the main job's model as its default recipe
// builds it (examples/common/fashion_cnn.h: channels 32/64, pool-first
// blocks, BatchNorm buffers) with Adam.
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

#include "common/fashion_cnn.h"
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

// The model to save and one input batch (a forward + Adam step creates the moments).
struct Subject {
  std::shared_ptr<::torch::nn::Module> module;
  std::function<::torch::Tensor()> loss;
  std::string what;
};

Subject make_subject(const std::string& model, int mb) {
  if (model == "fashion-cnn") {
    lockstep::examples::FashionCnn cnn(lockstep::examples::FashionCnnOptions{
        .channels1 = 32, .channels2 = 64, .make_norm = {}, .pool_first = true});
    return {cnn.ptr(),
            [cnn]() mutable {
              return cnn->forward(::torch::randn({4, 1, 28, 28})).sum();
            },
            "the main job's FashionCnn (32/64 channels)"};
  }
  // Layers of 1024 x 1024 floats (4 MiB each) up to --mb MB of parameters.
  ::torch::nn::Sequential seq;
  const int layers = std::max(1, static_cast<int>(mb * 1e6 / (1024.0 * 1024 * 4)));
  for (int l = 0; l < layers; ++l) seq->push_back(::torch::nn::Linear(1024, 1024));
  return {seq.ptr(),
          [seq]() mutable {
            return seq->forward(::torch::randn({4, 1024})).sum();
          },
          fmt::format("{} Linear(1024, 1024) layers", layers)};
}

// Parameters and Adam's two moments, plus the buffers: what one save writes.
double checkpoint_bytes(const ::torch::nn::Module& module) {
  double bytes = 0;
  for (const auto& p : module.parameters()) bytes += 3.0 * p.numel() * p.element_size();
  for (const auto& b : module.buffers()) bytes += static_cast<double>(b.numel() * b.element_size());
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  int mb = 128, rounds = 5;
  std::string model_name = "linear";  // linear (--mb) | fashion-cnn
  std::string dir = (fs::temp_directory_path() / "lockstep-checkpoint-bench").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mb")
      mb = std::atoi(argv[i + 1]);
    else if (flag == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (flag == "--dir")
      dir = argv[i + 1];
    else if (flag == "--model")
      model_name = argv[i + 1];
  }
  if (model_name != "linear" && model_name != "fashion-cnn") {
    fmt::print(stderr, "lockstep-checkpoint-bench: --model {}: give linear or fashion-cnn\n",
               model_name);
    return 2;
  }
  lt::init();
  const int rank = lt::rank(), size = lt::size();
  Subject subject = make_subject(model_name, mb);
  ::torch::nn::Module& model = *subject.module;
  ::torch::optim::Adam adam(model.parameters(), 1e-3);
  subject.loss().backward();
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
            lt::save_checkpoint(root + "/file.pt", model, adam, progress);
          }));
        },
        [&] {
          times["sharded sync"].push_back(
              timed(fmt::format("t.sync.{}", r), [&] { sync.save(model, adam, progress); }));
        },
        [&] {
          double pause = 0;
          times["async total"].push_back(timed(fmt::format("t.total.{}", r), [&] {
            pause = timed(fmt::format("t.pause.{}", r), [&] { async.save(model, adam, progress); });
            async.wait();
          }));
          times["async pause"].push_back(pause);
        }};
    // Interleaved, in a rotated order each round (the page cache and disk see each first).
    std::rotate(variants.begin(), variants.begin() + r % variants.size(), variants.end());
    for (auto& run : variants) run();
  }
  if (rank == 0) {
    const double bytes = checkpoint_bytes(model);
    fmt::print("checkpoint of {:.3f} MB ({} + Adam), {} rank(s), {} rounds, medians:\n",
               bytes / 1e6, subject.what, size, rounds);
    fmt::print("  {:<14} {:>10} {:>9}\n", "variant", "seconds", "GB/s");
    for (const char* v : {"rank-0 file", "sharded sync", "async pause", "async total"}) {
      const double m = median(times[v]);
      fmt::print("  {:<14} {:>10.5f} {:>9.2f}\n", v, m, bytes / m / 1e9);
      fmt::print("{}\n", nlohmann::json{{"bench", "checkpoint"},
                                        {"model", model_name},
                                        {"variant", v},
                                        {"ranks", size},
                                        {"bytes", bytes},
                                        {"median_s", m},
                                        {"rounds_s", times[v]}}
                             .dump());
    }
    const std::vector<std::pair<std::string, std::pair<std::string, std::string>>> ratios = {
        {"sharded sync / rank-0 file", {"sharded sync", "rank-0 file"}},
        {"async pause / sharded sync", {"async pause", "sharded sync"}},
        {"async pause / rank-0 file", {"async pause", "rank-0 file"}}};
    for (const auto& [label, ab] : ratios) {
      const double ratio = median(times[ab.first]) / median(times[ab.second]);
      fmt::print("  {:<28} {:.3f}x\n", label, ratio);
      fmt::print("{}\n", nlohmann::json{{"bench", "checkpoint"},
                                        {"model", model_name},
                                        {"ratio", label},
                                        {"ranks", size},
                                        {"value", ratio}}
                             .dump());
    }
    fs::remove_all(root);
  }
  lt::shutdown();
  return 0;
}
