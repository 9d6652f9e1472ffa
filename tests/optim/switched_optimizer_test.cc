// Optimizer switching and the batch-size schedule driving the sampler.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "lockstep/base/error.h"
#include "lockstep/optim/switched_optimizer.h"
#include "lockstep/torch/sampler.h"

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
    opt.zero_grad();
    w.mutable_grad() = grad_of(w.detach());
    opt.step(epoch);
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
