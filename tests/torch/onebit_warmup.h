// Shared by the 1-bit Adam and 1-bit LAMB tests (onebit_adam_test.cc,
// onebit_lamb_test.cc): a small model, per-rank batches, and the check that
// the warm-up steps are bitwise those of DistributedOptimizer over the same
// optimizer without compression.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "lockstep/torch/distributed_optimizer.h"

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

}  // namespace lockstep::torch::testing
