// Shared by the 1-bit Adam and 1-bit LAMB tests (onebit_adam_test.cc,
// onebit_lamb_test.cc): a small model, per-rank batches, the check that
// the warm-up steps are bitwise those of DistributedOptimizer over the same
// optimizer without compression, and the one that elements without any
// gradient in the warm-up stay put after it, and the one that steps over
// a tiny frozen variance stay within Adam's own bound.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/torch/distributed_optimizer.h"
#include "lockstep/torch/onebit.h"
#include "lockstep/torch/torch.h"

namespace lockstep::torch::testing {

inline ::torch::nn::Sequential onebit_model() {
  ::torch::manual_seed(5);
  return ::torch::nn::Sequential(::torch::nn::Linear(32, 48), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(48, 4));
}

// Cross-entropy on 16 random samples drawn from (step, this rank).
inline void onebit_backward(::torch::nn::Sequential& model, int step) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(100 * step + rank());
  ::torch::nn::functional::cross_entropy(model->forward(::torch::randn({16, 32}, g)),
                                         ::torch::randint(0, 4, {16}, g))
      .backward();
}

// Plain distributed training and the 1-bit scheme of `onebit` (compression
// and warm-up set) from the same start and the same batches, each over an
// optimizer from make(parameters): equal bits through the `warmup` steps
// (overlap on, so the gradients go from the backward hooks as without
// compression), different after.
template <class MakeOptimizer>
void check_warmup_is_plain(DistributedOptimizerOptions onebit, int warmup, MakeOptimizer make) {
  auto plain = onebit_model();
  auto compressed = onebit_model();
  std::unique_ptr<::torch::optim::Optimizer> opt_a = make(plain->parameters());
  std::unique_ptr<::torch::optim::Optimizer> opt_b = make(compressed->parameters());
  DistributedOptimizer a(*opt_a, *plain, {.name_prefix = "plain", .overlap = Overlap::kOn});
  onebit.name_prefix = "onebit";
  onebit.overlap = Overlap::kOn;
  DistributedOptimizer b(*opt_b, *compressed, onebit);
  auto same = [&] {
    for (size_t i = 0; i < plain->parameters().size(); ++i)
      if (!::torch::equal(plain->parameters()[i], compressed->parameters()[i])) return false;
    return true;
  };
  for (int step = 0; step <= warmup; ++step) {
    for (auto* pair : {&a, &b}) pair->zero_grad();
    onebit_backward(plain, step);
    onebit_backward(compressed, step);
    a.step();
    b.step();
    if (step < warmup) {
      EXPECT_TRUE(same()) << "warm-up step " << step;
    }
  }
  EXPECT_FALSE(same()) << "the compressed step changed nothing";
}

// Gradients averaged by hand (what DistributedOptimizer does in the
// warm-up of a 1-bit optimizer driven directly).
inline void average_gradients(::torch::nn::Sequential& model) {
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    allreduce_(params[i].mutable_grad(), "avg." + std::to_string(i), {.op = ReduceOp::kAverage});
}

// Input feature 0 is always 0, so column 0 of the first weight of
// onebit_model() never gets a gradient and its v is 0 at the freeze: the
// compression stage must leave it alone (without the mask it moved by
// lr ±scale/ε, and lockstep-parallelism's loss overflowed), the other
// columns move. `onebit` wraps an optimizer of `model` without weight
// decay, its warm-up shorter than 6 steps.
inline void check_zero_variance_stays_put(::torch::nn::Sequential& model, OneBitOptimizer& onebit) {
  const ::torch::Tensor weight = model->parameters()[0];
  const ::torch::Tensor start = weight.detach().clone();
  for (int step = 0; step < 6; ++step) {
    model->zero_grad();
    auto g = ::torch::make_generator<at::CPUGeneratorImpl>(300 * step + rank());
    ::torch::Tensor x = ::torch::randn({16, 32}, g);
    x.select(1, 0).zero_();
    ::torch::nn::functional::cross_entropy(model->forward(x), ::torch::randint(0, 4, {16}, g))
        .backward();
    if (!onebit.compressing()) average_gradients(model);
    onebit.step();
  }
  EXPECT_TRUE(onebit.compressing());
  EXPECT_TRUE(::torch::equal(weight.select(1, 0), start.select(1, 0)));
  EXPECT_FALSE(::torch::equal(weight.select(1, 1), start.select(1, 1)));
}

// Input feature 0 is scaled by 1e-4, so column 0 of the first weight's v is
// tiny but not 0 at the freeze, and the compressed momentum (± the mean |m|)
// over √v̂ there is thousands of times Adam's largest step. Every element's
// step of the compression stage must stay within step_limit(i) (lr times
// adam_step_bound for Adam, times the trust ratio for LAMB) for parameter i,
// and column 0 must reach it (the bound is what holds it back). `onebit`
// wraps an optimizer of `model` without weight decay, its warm-up shorter
// than 4 steps.
template <class StepLimit>
void check_tiny_variance_step_is_bounded(::torch::nn::Sequential& model, OneBitOptimizer& onebit,
                                         StepLimit step_limit) {
  const auto params = model->parameters();
  double column0 = 0;
  for (int step = 0; step < 8; ++step) {
    model->zero_grad();
    auto g = ::torch::make_generator<at::CPUGeneratorImpl>(500 * step + rank());
    ::torch::Tensor x = ::torch::randn({16, 32}, g);
    x.select(1, 0).mul_(1e-4);
    ::torch::nn::functional::cross_entropy(model->forward(x), ::torch::randint(0, 4, {16}, g))
        .backward();
    const bool compressed = onebit.compressing();
    if (!compressed) average_gradients(model);
    std::vector<::torch::Tensor> before;
    for (const auto& p : params) before.push_back(p.detach().clone());
    onebit.step();
    if (!compressed) continue;
    for (size_t i = 0; i < params.size(); ++i) {
      const ::torch::Tensor moved = (params[i].detach() - before[i]).abs();
      const double limit = step_limit(i);
      EXPECT_LE(moved.max().item<double>(), limit * (1 + 1e-4))
          << "parameter " << i << " at step " << step;
      if (i == 0) column0 = std::max(column0, moved.select(1, 0).max().item<double>() / limit);
    }
  }
  EXPECT_TRUE(onebit.compressing());
  EXPECT_NEAR(column0, 1.0, 1e-3) << "column 0's largest step over the limit: the bound never held "
                                     "it back, so v there is not tiny enough to test it";
}

}  // namespace lockstep::torch::testing
