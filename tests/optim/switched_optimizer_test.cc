// Optimizer switching, the optimizer wrappers under DistributedOptimizer and
// ElasticState, and the batch-size schedule driving the sampler.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "lockstep/base/error.h"
#include "lockstep/optim/larc.h"
#include "lockstep/optim/switched_optimizer.h"
#include "lockstep/torch/elastic.h"
#include "lockstep/torch/sampler.h"
#include "torch/helpers.h"

namespace lockstep::optim {
namespace {

::torch::Tensor grad_of(const ::torch::Tensor& w) { return w * 2.0 + 1.0; }  // d/dw (w² + w)

TEST(SwitchedOptimizer, FirstOptimizerBeforeTheSwitchThenPlainSgd) {
  auto w = ::torch::tensor({1.0, -2.0, 0.5}, ::torch::kFloat64).requires_grad_();
  auto reference = w.detach().clone().requires_grad_();
  auto rms = std::make_shared<::torch::optim::RMSprop>(std::vector<::torch::Tensor>{w},
                                                       ::torch::optim::RMSpropOptions(0.01));
  auto sgd = std::make_shared<::torch::optim::SGD>(std::vector<::torch::Tensor>{w},
                                                   ::torch::optim::SGDOptions(0.1));
  ::torch::optim::RMSprop rms_alone({reference}, ::torch::optim::RMSpropOptions(0.01));
  SwitchedOptimizer opt(rms, sgd, OptimizerSwitch{.switch_epoch = 2});
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    auto before = w.detach().clone();
    opt.set_epoch(epoch);
    opt.zero_grad();
    w.mutable_grad() = grad_of(w.detach());
    opt.step();
    if (epoch < 2) {
      reference.mutable_grad() = grad_of(reference.detach());
      rms_alone.step();
      EXPECT_TRUE(::torch::equal(w.detach(), reference.detach())) << "epoch " << epoch;
    } else {
      EXPECT_TRUE(::torch::allclose(w.detach(), before - 0.1 * grad_of(before), 0, 1e-15))
          << "epoch " << epoch;
    }
  }
  EXPECT_EQ(&opt.active(1), rms.get());
  EXPECT_EQ(&opt.active(2), sgd.get());
}

TEST(SwitchedOptimizer, RejectsMissingOptimizersAndNegativeEpochs) {
  auto w = ::torch::zeros({2}, ::torch::requires_grad());
  auto sgd = std::make_shared<::torch::optim::SGD>(std::vector<::torch::Tensor>{w},
                                                   ::torch::optim::SGDOptions(0.1));
  EXPECT_THROW(SwitchedOptimizer(nullptr, sgd, {}), InvalidArgument);
  EXPECT_THROW(SwitchedOptimizer(sgd, sgd, OptimizerSwitch{.switch_epoch = -1}), InvalidArgument);
  auto other = std::make_shared<::torch::optim::SGD>(
      std::vector<::torch::Tensor>{::torch::zeros({2}, ::torch::requires_grad())},
      ::torch::optim::SGDOptions(0.1));
  EXPECT_THROW(SwitchedOptimizer(sgd, other, {}), InvalidArgument);
}

// Issue 14: Larc and SwitchedOptimizer were not torch::optim::Optimizers, so
// neither DistributedOptimizer nor ElasticState could hold them. Two ranks
// train through DistributedOptimizer across the switch; a restore of a
// commit taken before it and a replay end bitwise where the first run did,
// so both optimizers' state and the active one travel through the wrapper.
TEST(OptimizerWrappers, TrainUnderDistributedOptimizerAndElasticState) {
  using namespace lockstep::torch;
  lockstep::torch::testing::run_torch_workers(2, [] {
    auto model = lockstep::torch::testing::make_mlp(5);
    auto params = model->parameters();
    auto momentum = std::make_shared<::torch::optim::SGD>(
        params, ::torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4));
    auto larc = std::make_shared<Larc>(momentum);
    auto adam = std::make_shared<::torch::optim::Adam>(params, ::torch::optim::AdamOptions(0.01));
    SwitchedOptimizer opt(adam, larc, OptimizerSwitch{.switch_epoch = 2});
    DistributedOptimizer dist(opt, *model);
    ElasticState state(*model, opt, nullptr, &dist);
    auto x = ::torch::arange(32, ::torch::kFloat32).view({4, 8}).sin() * (rank() + 1);
    auto train = [&](int64_t epoch) {
      opt.set_epoch(epoch);
      dist.zero_grad();
      (model->forward(x) - 1).pow(2).mean().backward();
      dist.step();
    };
    state.sync();
    train(0);
    state.commit();
    for (int64_t e = 1; e < 4; ++e) train(e);
    const auto trained = lockstep::torch::testing::flat_parameters(*model).clone();
    state.restore();
    EXPECT_EQ(opt.epoch(), 0);
    for (int64_t e = 1; e < 4; ++e) train(e);
    EXPECT_TRUE(::torch::equal(lockstep::torch::testing::flat_parameters(*model), trained));
    // Gradients were averaged: every rank holds the same parameters.
    auto all = allgather(trained.unsqueeze(0), "wrappers.params");
    EXPECT_TRUE(::torch::equal(all[0], all[1]));
  });
}

// "Increase the batch size instead of decaying the LR": every rank asks the
// schedule for the epoch's batch, so all ranks take the same number of equal
// batches and together still cover the dataset once per epoch.
TEST(BatchSizeScheduleWithSampler, EqualBatchesOnEveryRankAndFullCoverage) {
  BatchSizeSchedule schedule{.initial = 4, .factor = 2, .every_epochs = 1, .max_batch = 16};
  constexpr int64_t kDataset = 96;
  constexpr int kRanks = 3;
  std::vector<lockstep::torch::DistributedSampler> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back(lockstep::torch::DistributedSamplerOptions{
        .dataset_size = kDataset, .rank = r, .size = kRanks, .seed = 11});
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    int64_t batch = schedule.batch_at(epoch);
    EXPECT_EQ(batch, std::min<int64_t>(4 << epoch, 16));
    std::multiset<int64_t> seen;
    std::vector<int64_t> batches(kRanks, 0);
    for (int r = 0; r < kRanks; ++r) {
      ranks[r].set_epoch(epoch);
      for (auto b = ranks[r].next_batch(batch); !b.empty(); b = ranks[r].next_batch(batch)) {
        EXPECT_EQ(static_cast<int64_t>(b.size()), batch);  // 32 per rank divides evenly
        ++batches[r];
        seen.insert(b.begin(), b.end());
      }
    }
    EXPECT_EQ(batches[0], kDataset / kRanks / batch) << "epoch " << epoch;
    for (int r = 1; r < kRanks; ++r) EXPECT_EQ(batches[r], batches[0]);
    EXPECT_EQ(static_cast<int64_t>(seen.size()), kDataset);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), static_cast<size_t>(kDataset));
  }
}

}  // namespace
}  // namespace lockstep::optim
