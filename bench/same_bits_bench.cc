// What SameBitsStep costs against plain data parallelism on the same model
// (docs/performance.md, "Same bits at any world size"). Run under
// `lockstep run -np N`: interleaved rounds of `--steps` steps each mode, on a
// CNN shaped like the main job's (28x28 input, Conv+BatchNorm2d, a
// Linear+BatchNorm1d+Dropout head), global batch 128, K = 8 micro-batches.
// Prints per-round seconds, the median ratio and the bytes each mode sends
// per step (computed from the collectives' sizes). `hash STEPS` instead
// trains STEPS same-bits steps and prints `state hash: <hex>`, to compare
// world sizes and backends (`lockstep run --backend gloo|mpi|shm`).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "lockstep/torch/collectives.h"
#include "lockstep/torch/same_bits.h"

namespace {

namespace nn = torch::nn;
namespace lt = lockstep::torch;
constexpr int64_t kBatch = 128, kMicro = 8;

struct Net : nn::Module {
  nn::Sequential body{nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1)),
                      nn::BatchNorm2d(16),
                      nn::ReLU(),
                      nn::MaxPool2d(2),
                      nn::Flatten(),
                      nn::Linear(16 * 14 * 14, 64),
                      nn::BatchNorm1d(64),
                      nn::ReLU(),
                      nn::Dropout(0.25),
                      nn::Linear(64, 10)};
  Net() { register_module("body", body); }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double run_default(Net& net, torch::optim::Optimizer& opt, const torch::Tensor& x,
                   const torch::Tensor& y, int steps) {
  const int64_t share = kBatch / lt::size();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    auto xb = x.narrow(0, lt::rank() * share, share), yb = y.narrow(0, lt::rank() * share, share);
    nn::functional::cross_entropy(net.body->forward(xb), yb).backward();
    std::vector<torch::Tensor> grads;
    std::vector<std::string> names;
    for (auto& p : net.parameters()) {
      grads.push_back(p.mutable_grad());
      names.push_back(fmt::format("bench.g{}", names.size()));
    }
    lt::grouped_allreduce_async_(grads, names).wait();
    opt.step();
  }
  return seconds_since(t0);
}

double run_same_bits(Net& net, lt::SameBitsStep& driver, const torch::Tensor& x,
                     const torch::Tensor& y, int steps) {
  const int64_t m = kBatch / kMicro;
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s)
    driver.step([&](const lt::MicroBatch& mb) {
      return nn::functional::cross_entropy(net.body->forward(x.narrow(0, mb.index * m, m)),
                                           y.narrow(0, mb.index * m, m));
    });
  return seconds_since(t0);
}

int64_t wire_bytes(Net& net, bool same_bits) {
  int64_t params = 0, tensors = 0, channels = 0;
  for (auto& p : net.parameters()) params += p.numel(), ++tensors;
  for (auto& b : net.named_buffers())
    if (b.key().find("running_mean") != std::string::npos) channels += b.value().numel();
  if (!same_bits) return 4 * params;  // one f32 allreduce
  return 8 * params + 4 * tensors + kMicro * (2 * channels + 1) * 8;
}

// Each step's micro-batches come from their global index, so the data order
// is the same for every world size.
void print_hash(Net& net, torch::optim::Optimizer& opt, lt::SameBitsStep& driver, int steps) {
  const int64_t m = kBatch / kMicro;
  for (int s = 0; s < steps; ++s)
    driver.step([&](const lt::MicroBatch& mb) {
      auto gen = at::detail::createCPUGenerator(1000 + static_cast<uint64_t>(mb.global_index()));
      auto x = torch::randn({m, 1, 28, 28}, gen);
      auto y = torch::randint(10, {m}, gen, torch::kLong);
      return nn::functional::cross_entropy(net.body->forward(x), y);
    });
  if (lt::rank() == 0)
    fmt::print("np {} state hash: {}\n", lt::size(), lt::state_hash_hex(net, opt));
}

}  // namespace

int main(int argc, char** argv) {
  const bool hash = argc > 1 && std::string(argv[1]) == "hash";
  const int rounds = argc > 1 && !hash ? std::atoi(argv[1]) : 5;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  lt::init();
  torch::manual_seed(1);
  Net net;
  torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  lt::SameBitsOptions options;
  options.micro_batches = kMicro;
  lt::SameBitsStep driver(net, opt, options);  // also fixes 1 intra-op thread for both modes
  if (hash) {
    print_hash(net, opt, driver, steps);
    lt::shutdown();
    return 0;
  }
  auto x = torch::randn({kBatch, 1, 28, 28}), y = torch::randint(10, {kBatch});
  std::vector<double> ratios;
  for (int r = 0; r < rounds; ++r) {
    const double base = run_default(net, opt, x, y, steps);
    const double same = run_same_bits(net, driver, x, y, steps);
    ratios.push_back(same / base);
    if (lt::rank() == 0)
      fmt::print("round {}: default {:.3f} s, same-bits {:.3f} s, ratio {:.2f}\n", r, base, same,
                 same / base);
  }
  std::sort(ratios.begin(), ratios.end());
  if (lt::rank() == 0)
    fmt::print(
        "np {}: median ratio same-bits/default {:.2f}; bytes per step default {} same-bits {}\n",
        lt::size(), ratios[ratios.size() / 2], wire_bytes(net, false), wire_bytes(net, true));
  lt::shutdown();
}
