// A torch worker for elastic_growth_test.sh: a small MLP under run_elastic,
// a commit per step, SGD at kBaseLr * size(). The job starts with 2 workers
// and discovery adds a third once rank 0 created ELASTIC_GROWTH_STARTED_FILE
// after its first step; the worker trains until the world has grown
// to ELASTIC_GROWTH_SIZE and 20 steps more, then prints its learning rate
// and a digest of its parameters.
//
// By default the rate is set in an ElasticState::on_reset callback. With
// ELASTIC_GROWTH_NATURAL_PORT=1 it is set the way a Horovod port without
// reset callbacks does (issue 30.1): at start and when the elastic function
// is entered again. sync() hands the joiner rank 0's rate, so the joiner
// trains at another rate than the survivors, and the fingerprint check at
// the first commit after the re-formation must catch it.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "lockstep/base/error.h"
#include "lockstep/torch/torch.h"

namespace lt = lockstep::torch;

namespace {

constexpr double kBaseLr = 0.01;
constexpr int64_t kMaxSteps = 3000;  // ends a run whose world never grows
constexpr int64_t kStepsAfterGrowth = 20;

void set_lr(::torch::optim::SGD& sgd) {
  for (auto& group : sgd.param_groups())
    static_cast<::torch::optim::SGDOptions&>(group.options()).lr(kBaseLr * lt::size());
}

::torch::Tensor flat_parameters(::torch::nn::Module& module) {
  std::vector<::torch::Tensor> parts;
  for (auto& p : module.parameters()) parts.push_back(p.detach().flatten());
  return ::torch::cat(parts);
}

double lr_of(::torch::optim::SGD& sgd) {
  return static_cast<::torch::optim::SGDOptions&>(sgd.param_groups()[0].options()).lr();
}

}  // namespace

int main() {
  const char* natural_env = std::getenv("ELASTIC_GROWTH_NATURAL_PORT");
  const bool natural_port = natural_env && std::string(natural_env) == "1";
  const char* size_env = std::getenv("ELASTIC_GROWTH_SIZE");
  const int target = size_env ? std::atoi(size_env) : 3;
  const char* started_file = std::getenv("ELASTIC_GROWTH_STARTED_FILE");
  try {
    lt::init();
    ::torch::manual_seed(7);
    ::torch::nn::Sequential model(::torch::nn::Linear(8, 16), ::torch::nn::Tanh(),
                                  ::torch::nn::Linear(16, 4));
    ::torch::optim::SGD sgd(model->parameters(), ::torch::optim::SGDOptions(kBaseLr).momentum(0.5));
    lt::DistributedOptimizer dist(sgd, *model);
    lt::DistributedSampler sampler(
        {.dataset_size = 96, .rank = lt::rank(), .size = lt::size(), .seed = 3});
    lt::ElasticState state(*model, sgd, &sampler, &dist);
    auto data = ::torch::arange(96 * 8, ::torch::kFloat32).view({96, 8}).sin();
    bool entered = false;
    if (natural_port)
      set_lr(sgd);
    else
      state.on_reset([&] { set_lr(sgd); });
    lt::run_elastic(state, [&](lt::ElasticState& s) {
      if (natural_port && entered) set_lr(sgd);
      entered = true;
      // Synced values: every rank takes the same decision at the same step.
      if (lt::size() == target && !s.values.count("grown")) s.values["grown"] = s.step;
      while (s.step < kMaxSteps &&
             !(s.values.count("grown") && s.step >= s.values["grown"] + kStepsAfterGrowth)) {
        auto batch = sampler.next_batch(4);
        if (batch.empty()) {
          sampler.set_epoch(sampler.epoch() + 1);
          batch = sampler.next_batch(4);
        }
        auto x = data.index_select(0, ::torch::tensor(batch));
        dist.zero_grad();
        ::torch::mse_loss(model->forward(x), x.narrow(1, 0, 4).cos()).backward();
        dist.step();
        ++s.step;
        s.commit();
        // Tells the discovery script to offer the third slot: growth must
        // come after training started, not before the first world formed.
        if (s.step == 1 && lt::rank() == 0 && started_file)
          std::ofstream(started_file) << "started";
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
    const double digest = flat_parameters(*model).to(::torch::kFloat64).sum().item<double>();
    std::printf("growth-worker: rank %d size %d generation %d step %lld lr %.4f params %.17g\n",
                lt::rank(), lt::size(), lt::elastic_generation(),
                static_cast<long long>(state.step), lr_of(sgd), digest);
    lt::shutdown();
    return 0;
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "growth-worker: %s\n", e.what());
    return 1;
  }
}
