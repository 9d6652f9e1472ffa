// apply(schedule, optimizer, t): every group's lr, with and without ratios.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/optim/apply_schedule.h"
#include "lockstep/optim/lars.h"

namespace lockstep::optim {
namespace {

std::vector<torch::optim::OptimizerParamGroup> two_groups(double lr0, double lr1) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{torch::ones({2}, torch::requires_grad())},
                      std::make_unique<torch::optim::SGDOptions>(lr0));
  groups.emplace_back(std::vector<torch::Tensor>{torch::ones({2}, torch::requires_grad())},
                      std::make_unique<torch::optim::SGDOptions>(lr1));
  return groups;
}

double lr_of(const torch::optim::Optimizer& o, size_t k) {
  return o.param_groups()[k].options().get_lr();
}

TEST(ApplySchedule, SetsEveryGroup) {
  torch::optim::SGD sgd(two_groups(0.1, 0.01), torch::optim::SGDOptions(0.1));
  auto schedule = warmup(0.0, 10, constant(1.0));
  apply(schedule, sgd, 5);
  EXPECT_DOUBLE_EQ(lr_of(sgd, 0), 0.5);
  EXPECT_DOUBLE_EQ(lr_of(sgd, 1), 0.5);
}

TEST(ApplySchedule, KeepsRatiosThroughAZeroRate) {
  torch::optim::SGD sgd(two_groups(0.2, 0.05), torch::optim::SGDOptions(0.2));
  const auto ratios = lr_ratios(sgd);
  ASSERT_EQ(ratios, (std::vector<double>{1.0, 0.25}));
  auto schedule = warmup(0.0, 10, constant(2.0));
  apply(schedule, sgd, 0, ratios);  // both 0: current values no longer hold the ratio
  EXPECT_EQ(lr_of(sgd, 0), 0.0);
  EXPECT_EQ(lr_of(sgd, 1), 0.0);
  apply(schedule, sgd, 20, ratios);
  EXPECT_DOUBLE_EQ(lr_of(sgd, 0), 2.0);
  EXPECT_DOUBLE_EQ(lr_of(sgd, 1), 0.5);
  EXPECT_THROW(apply(schedule, sgd, 1, {1.0}), InvalidArgument);
}

TEST(ApplySchedule, WorksOnLockstepOptimizersAndRejectsNull) {
  Lars lars({torch::ones({2, 2}, torch::requires_grad())}, LarsOptions(0.1));
  apply(polynomial_decay(1.0, 4, 2), lars, 2);
  EXPECT_DOUBLE_EQ(static_cast<LarsOptions&>(lars.param_groups()[0].options()).lr(), 0.25);
  EXPECT_THROW(apply(nullptr, lars, 0), InvalidArgument);
  apply(constant(0.0), lars, 0);
  EXPECT_THROW(lr_ratios(lars), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::optim
