#include "tools/bench_train/worker.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "common/fashion_cnn.h"
#include "lockstep/base/error.h"
#include "lockstep/parallel/fully_sharded.h"
#include "lockstep/torch/same_bits.h"
#include "lockstep/torch/torch.h"

namespace lockstep::bench_train {
namespace {

namespace lt = lockstep::torch;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Window {
  double seconds = 0, wait_seconds = 0;
};

// FashionCnn's forward as a Sequential of its own modules (FSDP's units):
// conv, norm, relu, pool twice, then flatten and the head.
::torch::nn::Sequential as_sequential(examples::FashionCnn& m) {
  namespace nn = ::torch::nn;
  nn::Sequential seq;
  seq->push_back("conv1", m->conv1);
  seq->push_back("bn1", ::torch::nn::AnyModule(m->bn1));
  seq->push_back(nn::ReLU());
  seq->push_back(nn::MaxPool2d(2));
  seq->push_back("conv2", m->conv2);
  seq->push_back("bn2", ::torch::nn::AnyModule(m->bn2));
  seq->push_back(nn::ReLU());
  seq->push_back(nn::MaxPool2d(2));
  seq->push_back(nn::Flatten());
  seq->push_back("fc", m->fc);
  return seq;
}

// The micro-batches of the same-bits strategy: the main job's --same-bits
// default (K = 8), each batch_size * workers / 8 samples.
constexpr int64_t kSameBitsMicroBatches = 8;

// The same step as lockstep-fashion-mnist; `dist`, `fsdp` and `same_bits`
// are null for plain LibTorch. same-bits: the global batch of batch_size *
// workers samples in K micro-batches through SameBitsStep (the main job's
// --same-bits), so samples per second compare with data parallelism's at
// the same global batch.
class Stepper {
 public:
  Stepper(int64_t batch_size, const std::string& strategy, bool distributed, ::torch::Device device)
      : model_(to_device(examples::FashionCnn(), device)),
        x_(::torch::randn({batch_size, 1, 28, 28}).to(device)),
        y_(::torch::randint(0, 10, {batch_size}, ::torch::kInt64).to(device)),
        batch_size_(batch_size),
        cuda_(device.is_cuda()) {
    if (distributed && strategy == "fsdp") {
      fsdp_ = std::make_unique<lockstep::parallel::FullyShardedModel>(
          as_sequential(model_), lockstep::parallel::FullyShardedOptions{.layers_per_unit = 4});
      adam_ = std::make_unique<::torch::optim::Adam>(fsdp_->parameters(),
                                                     ::torch::optim::AdamOptions(1e-3));
      return;
    }
    if (distributed && strategy == "same-bits") {
      const int64_t global = batch_size * lt::size();
      if (global % kSameBitsMicroBatches != 0)
        throw InvalidArgument(
            fmt::format("bench train --strategy same-bits: --batch-size {} x {} "
                        "workers is not a multiple of {} micro-batches",
                        batch_size, lt::size(), kSameBitsMicroBatches));
      x_ = ::torch::randn({global, 1, 28, 28}).to(device);
      y_ = ::torch::randint(0, 10, {global}, ::torch::kInt64).to(device);
      adam_ = std::make_unique<::torch::optim::Adam>(model_->parameters(),
                                                     ::torch::optim::AdamOptions(1e-3));
      lt::SameBitsOptions options;
      options.micro_batches = kSameBitsMicroBatches;
      options.intra_op_threads = ::torch::get_num_threads();  // the layout's, not the mode's 1
      same_bits_ = std::make_unique<lt::SameBitsStep>(*model_, *adam_, options);
      return;
    }
    adam_ = std::make_unique<::torch::optim::Adam>(model_->parameters(),
                                                   ::torch::optim::AdamOptions(1e-3));
    if (distributed) {
      dist_ = std::make_unique<lt::DistributedOptimizer>(*adam_, *model_);
      lt::broadcast_parameters(*model_, 0);
    }
  }

  // Returns the seconds spent waiting for gradients' allreduces (fsdp: in
  // step(), the reduce-scatters' tail and the optimizer on the shards).
  double step() {
    if (same_bits_) {  // its reduction is inside step(): no wait is told apart
      const int64_t m = x_.size(0) / kSameBitsMicroBatches;
      same_bits_->step([&](const lt::MicroBatch& micro) {
        return ::torch::nn::functional::cross_entropy(
            model_->forward(x_.narrow(0, micro.index * m, m)), y_.narrow(0, micro.index * m, m));
      });
      return 0;
    }
    if (fsdp_) {
      fsdp_->zero_grad();
      ::torch::nn::functional::cross_entropy(fsdp_->forward(x_), y_).backward();
      auto wait_start = Clock::now();
      fsdp_->step(*adam_);
      return seconds_since(wait_start);
    }
    if (!dist_) {
      adam_->zero_grad();
      ::torch::nn::functional::cross_entropy(model_->forward(x_), y_).backward();
      adam_->step();
      return 0;
    }
    dist_->zero_grad();
    lt::profile_samples(batch_size_);  // LOCKSTEP_PROFILE's samples per step (no sampler here)
    ::torch::nn::functional::cross_entropy(model_->forward(x_), y_).backward();
    auto wait_start = Clock::now();
    dist_->synchronize();
    double waited = seconds_since(wait_start);
    dist_->step();
    return waited;
  }

  // On a GPU the window ends when the device has run its steps.
  Window window(int steps) {
    Window w;
    if (cuda_) ::torch::cuda::synchronize();
    auto start = Clock::now();
    for (int i = 0; i < steps; ++i) w.wait_seconds += step();
    if (cuda_) ::torch::cuda::synchronize();
    w.seconds = seconds_since(start);
    return w;
  }

 private:
  static examples::FashionCnn to_device(examples::FashionCnn model, ::torch::Device device) {
    model->to(device);
    return model;
  }

  examples::FashionCnn model_;
  std::unique_ptr<::torch::optim::Adam> adam_;
  ::torch::Tensor x_, y_;
  std::unique_ptr<lt::DistributedOptimizer> dist_;
  std::unique_ptr<lockstep::parallel::FullyShardedModel> fsdp_;
  std::unique_ptr<lt::SameBitsStep> same_bits_;
  int64_t batch_size_ = 0;
  bool cuda_ = false;
};

}  // namespace

WorkerResult run_worker(const WorkerConfig& config) {
  const bool distributed = config.variant == "lockstep";
  ::torch::Device device =
      config.device == "cuda" ? ::torch::Device(::torch::kCUDA, 0) : ::torch::Device(::torch::kCPU);
  if (distributed) {
    setenv("LOCKSTEP_DEVICE", config.device.c_str(), 1);  // read by the placement
    lt::init();
    device = lt::placement().torch_device();
    if (config.threads > 0) ::torch::set_num_threads(config.threads);
  } else {
    if (config.variant == "plain-malloc") lt::tune_malloc();  // isolates that one effect
    ::torch::set_num_threads(std::max(1, config.threads));
  }
  ::torch::manual_seed(0);
  Stepper stepper(config.batch_size, config.strategy, distributed, device);
  stepper.window(config.warmup_steps);
  std::vector<Window> windows;
  for (int i = 0; i < config.windows; ++i) windows.push_back(stepper.window(config.window_steps));
  // The slowest rank sets the pace: windows are timed between the same steps.
  std::sort(windows.begin(), windows.end(),
            [](const Window& a, const Window& b) { return a.seconds < b.seconds; });
  const Window& median = windows[windows.size() / 2];
  WorkerResult r;
  r.workers = lt::size();
  r.threads = ::torch::get_num_threads();
  r.step_ms = 1e3 * median.seconds / config.window_steps;
  r.samples_per_s = config.window_steps * config.batch_size * r.workers / median.seconds;
  r.comm_wait_share = median.seconds > 0 ? median.wait_seconds / median.seconds : 0;
  if (distributed) lt::shutdown();
  return r;
}

}  // namespace lockstep::bench_train
