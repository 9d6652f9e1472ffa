// A plain LibTorch CNN + SGD training program, and the same program made
// data-parallel the way README.md and docs/torch.md tell a new user to
// (lt::init, wrap the optimizer, broadcast, DistributedSampler): the
// held-out program of issue 13, which `bench/cnn_sgd.sh` times side by side.
//
// Built twice from this file: lockstep-cnn-sgd-plain (no lockstep at all,
// not even linked) and lockstep-cnn-sgd (LOCKSTEP_DIST). The model is the
// classic MNIST CNN: conv3x3(1->32) relu pool, conv3x3(32->64) relu pool,
// fc(3136->64) relu, fc(64->10); 220k parameters (0.88 MB of gradient).
// Data are synthetic Fashion-MNIST-shaped tensors held in memory; a batch is
// an index_select, as a user with an in-memory dataset writes it.
//
// Prints one JSON line (rank 0 only): samples/s of the whole job over the
// median of --windows timed windows, after --warmup-steps.
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <optional>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#ifdef LOCKSTEP_DIST
#include "lockstep/torch/torch.h"
namespace lt = lockstep::torch;
#endif

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)))),
        conv2(register_module("conv2",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(64 * 7 * 7, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

struct Args {
  int threads = 0;  // 0: LibTorch's default (plain) / lockstep's placement
  int64_t batch = 64;
  int64_t samples = 8192;
  int warmup = 10, window = 20, windows = 3;
  bool anatomy = false;  // time each phase of each step; one JSON line per rank
  std::string trace;     // --trace PREFIX: per-step phase timestamps to PREFIX.<rank>
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--trace") {
      a.trace = argv[i + 1];
      a.anatomy = true;
      continue;
    }
    long v = std::strtol(argv[i + 1], nullptr, 10);
    if (k == "--threads")
      a.threads = static_cast<int>(v);
    else if (k == "--batch-size")
      a.batch = v;
    else if (k == "--samples")
      a.samples = v;
    else if (k == "--warmup-steps")
      a.warmup = static_cast<int>(v);
    else if (k == "--window-steps")
      a.window = static_cast<int>(v);
    else if (k == "--windows")
      a.windows = static_cast<int>(v);
    else if (k == "--anatomy")
      a.anatomy = v != 0;
    else {
      std::fprintf(stderr, "cnn_sgd: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

// The sampler a plain program writes for itself: shuffled indices, cycled.
class Batches {
 public:
  Batches(int64_t n, int rank, int size) : n_(n), rank_(rank), size_(size) {
#ifdef LOCKSTEP_DIST
    sampler_.emplace(lt::DistributedSamplerOptions{.dataset_size = n, .rank = rank, .size = size});
#endif
    new_epoch();
  }
  torch::Tensor next(int64_t batch) {
#ifdef LOCKSTEP_DIST
    auto idx = sampler_->next_batch(batch);
    if (static_cast<int64_t>(idx.size()) < batch) {
      new_epoch();
      idx = sampler_->next_batch(batch);
    }
    return torch::tensor(idx, torch::kInt64);
#else
    if (pos_ + batch > n_) new_epoch();
    auto out = torch::from_blob(order_.data() + pos_, {batch}, torch::kInt64).clone();
    pos_ += batch;
    return out;
#endif
  }

 private:
  void new_epoch() {
    ++epoch_;
#ifdef LOCKSTEP_DIST
    sampler_->set_epoch(epoch_);
#else
    order_.resize(n_);
    std::iota(order_.begin(), order_.end(), 0);
    std::shuffle(order_.begin(), order_.end(), std::mt19937_64(epoch_));
    pos_ = 0;
#endif
  }
  int64_t n_;
  [[maybe_unused]] int rank_, size_;
  int64_t epoch_ = 0;
#ifdef LOCKSTEP_DIST
  std::optional<lt::DistributedSampler> sampler_;
#else
  std::vector<int64_t> order_;
  int64_t pos_ = 0;
#endif
};

// Per phase: mean and p90 in ms, and the mean/p90 of the compute part
// (data + forward + backward + optimizer), whose spread across ranks is what
// a synchronous step waits for.
template <size_t N>
std::string fmt_anatomy(int rank, const std::vector<std::array<double, N>>& steps,
                        const char* const (&names)[N]) {
  auto stats = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / std::max<size_t>(1, v.size());
    return std::pair{1e3 * mean, 1e3 * v[v.size() * 9 / 10]};
  };
  std::string out = "{\"anatomy_rank\":" + std::to_string(rank);
  std::vector<double> compute;
  for (size_t i = 0; i < N; ++i) {
    std::vector<double> v;
    for (const auto& s : steps) v.push_back(s[i]);
    auto [mean, p90] = stats(v);
    char buf[128];
    std::snprintf(buf, sizeof buf, ",\"%s_ms\":%.3f,\"%s_p90_ms\":%.3f", names[i], mean, names[i],
                  p90);
    out += buf;
  }
  for (const auto& s : steps) compute.push_back(s[0] + s[1] + s[2] + s[4]);
  auto [mean, p90] = stats(compute);
  char buf[128];
  std::snprintf(buf, sizeof buf, ",\"compute_ms\":%.3f,\"compute_p90_ms\":%.3f}", mean, p90);
  return out + buf;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  int rank = 0, size = 1;
#ifdef LOCKSTEP_DIST
  lt::init();
  rank = lt::rank();
  size = lt::size();
#endif
  if (a.threads > 0) torch::set_num_threads(a.threads);
  torch::manual_seed(0);
  torch::Tensor images = torch::randn({a.samples, 1, 28, 28});
  torch::Tensor labels = torch::randint(0, 10, {a.samples}, torch::kInt64);
  Net model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
#ifdef LOCKSTEP_DIST
  lt::DistributedOptimizer opt(sgd, *model);
  lt::broadcast_parameters(*model, 0);
#else
  torch::optim::SGD& opt = sgd;
#endif
  Batches batches(a.samples, rank, size);
  using Clock = std::chrono::steady_clock;
  // --anatomy: per step, seconds in data, forward, backward, gradient
  // synchronisation (lockstep only) and the optimizer step.
  constexpr int kPhases = 5;
  const char* phase_names[kPhases] = {"data", "forward", "backward", "sync", "optimizer"};
  std::vector<std::array<double, kPhases>> phases;
  std::vector<std::array<Clock::time_point, kPhases + 1>> stamps;
  auto train_steps = [&](int steps) {
    for (int s = 0; s < steps; ++s) {
      std::array<Clock::time_point, kPhases + 1> t;
      t[0] = Clock::now();
      torch::Tensor idx = batches.next(a.batch);
      torch::Tensor x = images.index_select(0, idx), y = labels.index_select(0, idx);
      opt.zero_grad();
      t[1] = Clock::now();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      t[2] = Clock::now();
      loss.backward();
      t[3] = Clock::now();
#ifdef LOCKSTEP_DIST
      if (a.anatomy) opt.synchronize();
#endif
      t[4] = Clock::now();
      opt.step();
      t[5] = Clock::now();
      if (a.anatomy) {
        std::array<double, kPhases> d;
        for (int i = 0; i < kPhases; ++i)
          d[i] = std::chrono::duration<double>(t[i + 1] - t[i]).count();
        phases.push_back(d);
        if (!a.trace.empty()) stamps.push_back(t);
      }
    }
  };
  train_steps(a.warmup);
  std::vector<double> seconds;
  for (int w = 0; w < a.windows; ++w) {
    auto t0 = Clock::now();
    train_steps(a.window);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  double median = seconds[seconds.size() / 2];
  if (rank == 0)
    std::printf(
        "{\"program\":\"cnn_sgd\",\"workers\":%d,\"threads\":%d,\"samples_per_s\":%.1f,"
        "\"step_ms\":%.3f}\n",
        size, torch::get_num_threads(), a.window * a.batch * size / median,
        1e3 * median / a.window);
  if (a.anatomy) {
    // Timed windows only: drop the warm-up steps.
    phases.erase(phases.begin(), phases.begin() + a.warmup);
    std::string line = fmt_anatomy(rank, phases, phase_names);
    std::printf("%s\n", line.c_str());
  }
  if (!a.trace.empty()) {
    // CLOCK_MONOTONIC is one clock for every process on the host, so ranks'
    // stamps line up: per step, the last rank's sync entry is when the
    // allreduce could start.
    FILE* f = std::fopen((a.trace + "." + std::to_string(rank)).c_str(), "w");
    for (const auto& t : stamps) {
      for (const auto& x : t)
        std::fprintf(f, "%lld ",
                     static_cast<long long>(
                         std::chrono::duration_cast<std::chrono::nanoseconds>(x.time_since_epoch())
                             .count()));
      std::fprintf(f, "\n");
    }
    std::fclose(f);
  }
#ifdef LOCKSTEP_DIST
  lt::shutdown();
#endif
  return 0;
}
