// Gradient noise: moments within honest statistical tolerances (fixed
// seeds, 5 standard errors), and the (seed, t) determinism ranks rely on.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/optim/gradient_noise.h"

namespace lockstep::optim {
namespace {

constexpr int64_t kSamples = 100000;

torch::Tensor param_with_grad(const torch::Tensor& grad) {
  auto p = torch::zeros_like(grad).requires_grad_();
  p.mutable_grad() = grad.clone();
  return p;
}

// Sample mean and variance of x within 5 standard errors of the expected
// values (SE of the variance of a Gaussian sample: σ²·√(2/(n−1))).
void expect_moments(const torch::Tensor& x, double mean, double variance) {
  const double n = static_cast<double>(x.numel());
  const double got_mean = x.mean().item<double>(), got_var = x.var().item<double>();
  EXPECT_NEAR(got_mean, mean, 5 * std::sqrt(variance / n));
  EXPECT_NEAR(got_var, variance, 5 * variance * std::sqrt(2 / (n - 1)));
}

TEST(GradientNoise, AnnealedVarianceFollowsTheSchedule) {
  AnnealedNoiseOptions o;
  EXPECT_DOUBLE_EQ(annealed_noise_variance(o, 0), 0.3);
  EXPECT_NEAR(annealed_noise_variance(o, 99), 0.3 / std::pow(100.0, 0.55), 1e-15);
  EXPECT_THROW(annealed_noise_variance(o, -1), InvalidArgument);
  EXPECT_THROW(annealed_noise_variance({.eta = -1}, 0), InvalidArgument);
}

TEST(GradientNoise, AnnealedNoiseHasTheScheduledMoments) {
  AnnealedNoiseOptions o{.eta = 1.0, .gamma = 0.55, .seed = 7};
  const int64_t t = 9;
  const double variance = 1.0 / std::pow(10.0, 0.55);
  auto p = param_with_grad(torch::full({kSamples}, 2.0, torch::kFloat64));
  add_annealed_gradient_noise({p}, t, o);
  expect_moments(p.grad(), 2.0, variance);
}

TEST(GradientNoise, MultiplicativeNoiseHasTheConfiguredMoments) {
  // ĝ = g·z, z ~ N(1, 0.25): mean g, variance g²·0.25.
  auto p = param_with_grad(torch::full({kSamples}, -3.0, torch::kFloat64));
  apply_multiplicative_gradient_noise({p}, 4, {.variance = 0.25, .seed = 11});
  expect_moments(p.grad(), -3.0, 9 * 0.25);
  EXPECT_DOUBLE_EQ(batch_ratio_variance(4096, 256), 16.0);
  EXPECT_DOUBLE_EQ(batch_ratio_variance(4096, 256, 0.5), 8.0);
  EXPECT_THROW(batch_ratio_variance(0, 256), InvalidArgument);
  EXPECT_THROW(apply_multiplicative_gradient_noise({p}, 0, {.variance = -1}), InvalidArgument);
}

TEST(GradientNoise, SameSeedAndIterationGiveBitwiseEqualNoise) {
  auto draw = [](uint64_t seed, int64_t t) {
    std::vector<torch::Tensor> params = {param_with_grad(torch::zeros({3, 4})),
                                         param_with_grad(torch::zeros({5}, torch::kFloat64))};
    add_annealed_gradient_noise(params, t, {.seed = seed});
    return params;
  };
  auto a = draw(42, 100), b = draw(42, 100), later = draw(42, 101), other = draw(43, 100);
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_TRUE(torch::equal(a[k].grad(), b[k].grad())) << k;
    EXPECT_FALSE(torch::equal(a[k].grad(), later[k].grad())) << k;
    EXPECT_FALSE(torch::equal(a[k].grad(), other[k].grad())) << k;
  }
  // The global torch generator plays no part.
  torch::manual_seed(0);
  auto c = draw(42, 100);
  EXPECT_TRUE(torch::equal(a[0].grad(), c[0].grad()));
}

TEST(GradientNoise, TensorsDrawDistinctNoiseAndGradlessOnesAreSkipped) {
  auto a = param_with_grad(torch::zeros({8}));
  auto b = param_with_grad(torch::zeros({8}));
  auto none = torch::zeros({8}).requires_grad_();
  apply_multiplicative_gradient_noise({a, none, b}, 3, {.variance = 1.0, .seed = 5});
  EXPECT_TRUE(torch::equal(a.grad(), torch::zeros({8})));  // 0·z = 0
  add_annealed_gradient_noise({a, none, b}, 3, {.seed = 5});
  EXPECT_FALSE(torch::equal(a.grad(), b.grad()));
  EXPECT_FALSE(none.grad().defined());
}

}  // namespace
}  // namespace lockstep::optim
