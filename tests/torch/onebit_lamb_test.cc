// 1-bit LAMB (onebit_lamb.h) at 2 ranks: its warm-up steps are bitwise those
// of DistributedOptimizer over Lamb without compression; the trust ratio
// frozen at the end of the warm-up is the bias-corrected average of the
// ratios plain LAMB applied (computed here from Lamb's own state), and the
// compressed steps' ratios stay within the factor bounds and the per-step
// threshold around it, identical on both ranks; with constant local
// gradients the compressed momenta average to the true mean gradient
// (error feedback: without it they stay as far off as one step); elements
// whose variance is 0 at the freeze do not move after it, and those whose
// variance is tiny move no further than lr · trust ratio · Adam's bound
// (Note [1-bit step bound]); bad options and
// the wrong optimizer get named errors. onebit_adam_test.cc checks its bytes
// against the planner and the closed form, compression_test.cc trains a
// classifier with it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/base/error.h"
#include "lockstep/optim/lamb.h"
#include "lockstep/optim/state_key.h"
#include "lockstep/torch/distributed_optimizer.h"
#include "torch/helpers.h"
#include "torch/onebit_warmup.h"

// A named namespace: the unity build compiles this file with
// onebit_adam_test.cc, whose anonymous helpers have the same names.
namespace lockstep::torch::onebit_lamb_test {
namespace {

using testing::run_torch_workers;
using ::torch::Tensor;
namespace nn = ::torch::nn;

using testing::onebit_backward;
using testing::onebit_model;

optim::LambOptions lamb_options() { return optim::LambOptions(0.02).weight_decay(0.01); }

const optim::LambParamState& state(optim::Lamb& lamb, const Tensor& p) {
  return static_cast<const optim::LambParamState&>(*lamb.state().at(optim::state_key(p)));
}

void check_warmup_is_plain_lamb() {
  testing::check_warmup_is_plain(
      {.compression = Compression::kOneBitLamb, .onebit_lamb = {.warmup_steps = 3}}, 3,
      [](std::vector<Tensor> params) {
        return std::make_unique<optim::Lamb>(std::move(params), lamb_options());
      });
}

using testing::average_gradients;

// c̄ against the average of Lamb's own trust ratios; c̄ r within the bounds.
void check_trust_ratios_follow_the_paper() {
  auto model = onebit_model();
  optim::Lamb lamb(model->parameters(), lamb_options());
  const OneBitLambOptions o{.warmup_steps = 5, .coeff_beta = 0.8};
  OneBitLamb onebit(lamb, o, Group(), "trust");
  const size_t n = model->parameters().size();
  std::vector<double> sum(n, 0.0), weight(n, 0.0);
  for (int step = 0; step < o.warmup_steps; ++step) {
    model->zero_grad();
    onebit_backward(model, step);
    average_gradients(model);
    onebit.step();
    for (size_t i = 0; i < n; ++i) {
      const double c = state(lamb, model->parameters()[i]).trust_ratio().item<double>();
      ASSERT_NE(c, 1.0) << "a ratio of 1 would be left out of the average";
      sum[i] = o.coeff_beta * sum[i] + (1 - o.coeff_beta) * c;
      weight[i] = o.coeff_beta * weight[i] + (1 - o.coeff_beta);
      EXPECT_DOUBLE_EQ(onebit.trust_ratios()[i], c);
    }
  }
  ASSERT_TRUE(onebit.compressing());
  std::vector<double> last(n, 1.0);
  bool moved = false;
  for (int step = o.warmup_steps; step < o.warmup_steps + 6; ++step) {
    model->zero_grad();
    onebit_backward(model, step);  // local gradients
    onebit.step();
    const std::vector<double> frozen = onebit.frozen_trust_ratios();
    const std::vector<double> trust = onebit.trust_ratios();
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(frozen[i], sum[i] / weight[i], 1e-6 * frozen[i]) << "parameter " << i;
      const double r = trust[i] / frozen[i];
      EXPECT_GE(r, o.factor_min - 1e-6);
      EXPECT_LE(r, o.factor_max + 1e-6);
      EXPECT_LE(std::abs(r / last[i] - 1), o.factor_threshold + 1e-5) << "step " << step;
      moved = moved || std::abs(r - 1) > 1e-3;
      last[i] = r;
    }
  }
  EXPECT_TRUE(moved) << "r never left 1: the frozen variance's drift is not followed";
  // Both ranks applied the same compressed momenta: the same parameters.
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(::torch::equal(
        allreduce(params[i], fmt::format("same.{}", i), {.op = ReduceOp::kMax}), params[i]));
}

void check_zero_variance_stays_put() {
  auto model = onebit_model();
  optim::Lamb lamb(model->parameters(), optim::LambOptions(0.02));  // no decay: u = 0 there
  OneBitLamb onebit(lamb, {.warmup_steps = 3}, Group(), "dead");
  testing::check_zero_variance_stays_put(model, onebit);
}

// LAMB's step is lr · trust ratio · u, its u bounded as 1-bit Adam's step.
void check_tiny_variance_step_is_bounded() {
  auto model = onebit_model();
  const optim::LambOptions o(0.02);  // no decay: u is the bounded direction alone
  optim::Lamb lamb(model->parameters(), o);
  OneBitLamb onebit(lamb, {.warmup_steps = 3}, Group(), "tiny");
  const double bound = adam_step_bound(o.beta1(), o.beta2());
  testing::check_tiny_variance_step_is_bounded(
      model, onebit, [&](size_t i) { return o.lr() * onebit.trust_ratios()[i] * bound; });
}

// lr 0 keeps the parameters, so each rank's gradient is the same every
// step; with error feedback the compressed momenta's running mean
// approaches the true mean gradient (m's fixed point); one step does not,
// nor do 100 without the error feedback (measured: 0.07 off with it, 0.76
// off when it was dropped from CompressedAllreduce, 0.76 after one step).
void check_error_feedback_is_kept() {
  // The running mean of m is off by the momentum's memory, about
  // (|m| + |error|) / ((1 − β1) k) after k steps: β1 = 0.5 keeps that small.
  // The warm-up brings m to within 0.5^20 of the mean gradient, so what
  // follows measures the compression, not m's ramp.
  constexpr int kWarmup = 20, kCompressed = 100;
  auto model = onebit_model();
  optim::Lamb lamb(model->parameters(), optim::LambOptions(0.0).beta1(0.5));
  DistributedOptimizer dist(lamb, *model,
                            {.compression = Compression::kOneBitLamb,
                             .onebit_lamb = {.warmup_steps = kWarmup},
                             .name_prefix = "ef",
                             .overlap = Overlap::kOff});
  const auto params = model->parameters();
  std::vector<Tensor> mean_grad, applied;
  double first_error = 0, error = 0;
  for (int step = 0; step < kWarmup + kCompressed; ++step) {
    dist.zero_grad();
    onebit_backward(model, 0);  // the same batch every step
    if (mean_grad.empty())
      for (size_t i = 0; i < params.size(); ++i)
        mean_grad.push_back(
            allreduce(params[i].grad(), fmt::format("ef.mean.{}", i), {.op = ReduceOp::kAverage}));
    dist.step();
    if (step < kWarmup) continue;
    Tensor err = ::torch::zeros({}), ref = ::torch::zeros({});
    for (size_t i = 0; i < mean_grad.size(); ++i) {
      const Tensor m = state(lamb, params[i]).exp_avg();
      if (applied.size() <= i) applied.push_back(::torch::zeros_like(m));
      applied[i] += m;
      err += (applied[i] / (step - kWarmup + 1) - mean_grad[i]).square().sum();
      ref += mean_grad[i].square().sum();
    }
    error = (err.sqrt() / ref.sqrt()).item<double>();
    if (step == kWarmup) first_error = error;
  }
  EXPECT_LT(error, 0.1) << "after " << kCompressed << " compressed steps";
  EXPECT_LT(error, first_error / 4) << "one step: " << first_error;
  if (rank() == 0)
    std::printf("1-bit LAMB momentum vs mean gradient: %.4f after 1 step, %.4f after %d\n",
                first_error, error, kCompressed);
}

std::string error_of(const std::function<void()>& make) {
  try {
    make();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

void check_named_errors() {
  auto model = onebit_model();
  ::torch::optim::Adam adam(model->parameters(), ::torch::optim::AdamOptions(0.1));
  optim::Lamb lamb(model->parameters(), lamb_options());
  const DistributedOptimizerOptions o{.compression = Compression::kOneBitLamb,
                                      .overlap = Overlap::kOff};
  auto expect_named = [](const std::string& message, const std::string& name) {
    EXPECT_NE(message.find(name), std::string::npos) << message;
  };
  expect_named(error_of([&] { DistributedOptimizer d(adam, *model, o); }), "lockstep::optim::Lamb");
  auto adam_over_lamb = o;
  adam_over_lamb.compression = Compression::kOneBitAdam;
  expect_named(error_of([&] { DistributedOptimizer d(lamb, *model, adam_over_lamb); }),
               "kOneBitLamb");
  auto with = [&](OneBitLambOptions bad) {
    auto options = o;
    options.onebit_lamb = bad;
    return error_of([&] { DistributedOptimizer d(lamb, *model, options); });
  };
  expect_named(with({.warmup_steps = 0}), "warmup_steps=0");
  expect_named(with({.coeff_beta = 1}), "coeff_beta=1");
  expect_named(with({.factor_min = 0}), "factor_min=0");
  expect_named(with({.factor_max = 0.5}), "factor_max=0.5");
  expect_named(with({.factor_threshold = -1}), "factor_threshold=-1");
  auto sum = o;
  sum.op = ReduceOp::kSum;
  const std::string summed = error_of([&] { DistributedOptimizer d(lamb, *model, sum); });
  expect_named(summed, "1-bit LAMB");
  expect_named(summed, "kAverage");
}

TEST(OneBitLamb, WarmupIsPlainLambThenFrozenTrustRatiosErrorFeedbackAndZeroVariance) {
  run_torch_workers(2, [] {
    check_named_errors();
    check_warmup_is_plain_lamb();
    check_trust_ratios_follow_the_paper();
    check_zero_variance_stays_put();
    check_tiny_variance_step_is_bounded();
    check_error_feedback_is_kept();
  });
}

}  // namespace
}  // namespace lockstep::torch::onebit_lamb_test
