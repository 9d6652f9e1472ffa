// Schedules against values worked out by hand from the published formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/base/error.h"
#include "lockstep/optim/schedule.h"

namespace lockstep::optim {
namespace {

TEST(ScalingRules, LinearAndSqrtFromReferenceBatch) {
  // Goyal et al.: 0.1 per 256 images; a global batch of 8192 is k = 32.
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, ScalingRule::kLinear, 8192, 256), 3.2);
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, ScalingRule::kSqrt, 8192, 256), 0.1 * std::sqrt(32.0));
  EXPECT_DOUBLE_EQ(scaled_lr(0.1, ScalingRule::kNone, 8192, 256), 0.1);
  EXPECT_EQ(parse_scaling_rule("sqrt"), ScalingRule::kSqrt);
  EXPECT_THROW(parse_scaling_rule("cubic"), InvalidArgument);
  EXPECT_THROW(scaled_lr(0.1, ScalingRule::kLinear, 0, 256), InvalidArgument);
}

TEST(Decays, ClosedFormValues) {
  auto step = step_decay(0.4, 30, 0.1);
  EXPECT_DOUBLE_EQ(step->lr_at(29), 0.4);
  EXPECT_NEAR(step->lr_at(30), 0.04, 1e-15);
  EXPECT_NEAR(step->lr_at(65), 0.004, 1e-15);

  EXPECT_NEAR(exponential_decay(1.0, 0.5)->lr_at(3), 0.125, 1e-15);

  // LARS' polynomial (power 2): at t = T/4, (3/4)^2 = 0.5625.
  auto poly = polynomial_decay(2.0, 100, 2.0);
  EXPECT_NEAR(poly->lr_at(25), 2.0 * 0.5625, 1e-12);
  EXPECT_EQ(poly->lr_at(100), 0.0);
  EXPECT_EQ(poly->lr_at(1000), 0.0);

  auto cosine = cosine_decay(1.0, 100, 0.1);
  EXPECT_NEAR(cosine->lr_at(0), 1.0, 1e-12);
  EXPECT_NEAR(cosine->lr_at(50), 0.55, 1e-12);  // midway: end + (lr - end) / 2
  EXPECT_NEAR(cosine->lr_at(100), 0.1, 1e-12);
}

// Horovod's pytorch_imagenet_resnet50.py: lr_adj = 1 before epoch 30, 1e-1
// before 60, 1e-2 before 80, 1e-3 after; worked out by hand, not by the
// formula the schedule uses.
TEST(Decays, MultiStepDividesAtEachMilestone) {
  auto s = multi_step(0.1, {30, 60, 80}, 0.1);
  const std::pair<int64_t, double> expected[] = {{0, 0.1},     {29, 0.1},    {30, 0.01},
                                                 {59, 0.01},   {60, 0.001},  {79, 0.001},
                                                 {80, 0.0001}, {90, 0.0001}, {10000, 0.0001}};
  for (auto [epoch, lr] : expected) EXPECT_NEAR(s->lr_at(epoch), lr, 1e-15) << "epoch " << epoch;
  EXPECT_DOUBLE_EQ(multi_step(1.0, {1}, 0.5)->lr_at(1), 0.5);
  EXPECT_THROW(multi_step(0.1, {}, 0.1), InvalidArgument);
  EXPECT_THROW(multi_step(0.1, {30, 30}, 0.1), InvalidArgument);
  EXPECT_THROW(multi_step(0.1, {0, 10}, 0.1), InvalidArgument);
  EXPECT_THROW(multi_step(0.1, {10}, 0), InvalidArgument);
}

TEST(Warmup, RampsLinearlyThenHandsOverShifted) {
  // Goyal et al.: from 0.1 to 3.2 over 5 epochs of 100 iterations, then
  // step decay by 10x every 3000 iterations counted after the warmup.
  auto s = warmup(0.1, 500, step_decay(3.2, 3000, 0.1));
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.1);
  EXPECT_NEAR(s->lr_at(250), 0.1 + (3.2 - 0.1) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(s->lr_at(500), 3.2);
  EXPECT_DOUBLE_EQ(s->lr_at(3499), 3.2);
  EXPECT_NEAR(s->lr_at(3500), 0.32, 1e-12);
  EXPECT_DOUBLE_EQ(warmup(0.1, 0, constant(0.7))->lr_at(0), 0.7);
}

TEST(Composition, ProductOfSchedules) {
  auto s = product(constant(2.0), exponential_decay(1.0, 0.5));
  EXPECT_NEAR(s->lr_at(2), 0.5, 1e-15);
  auto chained = warmup(0.0, 10, product(constant(1.0), cosine_decay(1.0, 90)));
  EXPECT_NEAR(chained->lr_at(5), 0.5, 1e-12);
  EXPECT_NEAR(chained->lr_at(10 + 45), 0.5, 1e-12);
}

TEST(Schedules, NegativeIterationsClampAndBadParametersThrow) {
  EXPECT_DOUBLE_EQ(step_decay(0.4, 30, 0.1)->lr_at(-5), 0.4);
  EXPECT_THROW(constant(-1.0), InvalidArgument);
  EXPECT_THROW(step_decay(0.1, 0, 0.1), InvalidArgument);
  EXPECT_THROW(cosine_decay(0.1, 0), InvalidArgument);
  EXPECT_THROW(warmup(0.1, 10, nullptr), InvalidArgument);
}

TEST(BatchSizeSchedule, GrowsInsteadOfDecayingUpToTheCap) {
  BatchSizeSchedule b{.initial = 128, .factor = 5, .every_epochs = 30, .max_batch = 2000};
  EXPECT_EQ(b.batch_at(0), 128);
  EXPECT_EQ(b.batch_at(29), 128);
  EXPECT_EQ(b.batch_at(30), 640);
  EXPECT_EQ(b.batch_at(60), 2000);  // 3200 capped
  BatchSizeSchedule bad{.initial = 64, .factor = 0.5};
  EXPECT_THROW(bad.batch_at(0), InvalidArgument);
}

TEST(OptimizerSwitch, SecondOptimizerFromTheSwitchEpoch) {
  OptimizerSwitch s{.switch_epoch = 30};
  EXPECT_FALSE(s.second_active(29));
  EXPECT_TRUE(s.second_active(30));
}

TEST(OneCycle, RisesToThePeakThenAnnealsToTheFloor) {
  // PyTorch's defaults: start max/25, end max/25/1e4, peak at 25% here.
  auto s = one_cycle(0.1, 100, {.pct_start = 0.25});
  EXPECT_NEAR(s->lr_at(0), 0.004, 1e-15);
  EXPECT_NEAR(s->lr_at(25), 0.1, 1e-15);
  // Half-way up a half cosine is the mean of its ends.
  EXPECT_NEAR(s->lr_at(12) + s->lr_at(13), 2 * (0.004 + 0.1) / 2, 2e-3);
  EXPECT_NEAR(one_cycle(0.1, 100, {.pct_start = 0.5})->lr_at(25), (0.004 + 0.1) / 2, 1e-12);
  EXPECT_NEAR(s->lr_at(100), 0.004 / 1e4, 1e-15);
  EXPECT_NEAR(s->lr_at(1000), 0.004 / 1e4, 1e-15);
  // Linear legs: a quarter of the way down is a quarter of the drop.
  auto lin = one_cycle(
      1.0, 100, {.pct_start = 0.2, .div_factor = 10, .final_div_factor = 10, .cosine = false});
  EXPECT_NEAR(lin->lr_at(10), (0.1 + 1.0) / 2, 1e-12);
  EXPECT_NEAR(lin->lr_at(40), 1.0 - 0.25 * (1.0 - 0.01), 1e-12);
  EXPECT_NEAR(one_cycle(1.0, 10, {.pct_start = 1.0})->lr_at(10), 1.0, 1e-12);
  EXPECT_THROW(one_cycle(1.0, 0), InvalidArgument);
  EXPECT_THROW(one_cycle(1.0, 10, {.pct_start = 1.5}), InvalidArgument);
  EXPECT_THROW(one_cycle(1.0, 10, {.div_factor = 0.5}), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::optim
