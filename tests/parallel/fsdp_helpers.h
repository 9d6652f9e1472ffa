// Shared by the FullyShardedModel tests (the Sequential path and the module
// path): the optimizers they compare, each rank's rows of a step's global
// batch, and the relative error they bound.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/optim/lamb.h"
#include "lockstep/torch/torch.h"

namespace lockstep::parallel::testing {

constexpr int64_t kGlobalBatch = 8;

inline std::unique_ptr<::torch::optim::Optimizer> make_optimizer(const std::string& kind,
                                                                 std::vector<::torch::Tensor> params) {
  if (kind == "adam")
    return std::make_unique<::torch::optim::Adam>(params, ::torch::optim::AdamOptions(0.01));
  if (kind == "lamb")
    return std::make_unique<optim::Lamb>(params, optim::LambOptions(0.01).weight_decay(0.01));
  return std::make_unique<::torch::optim::SGD>(params, ::torch::optim::SGDOptions(0.05).momentum(0.9));
}

// This rank's rows of step s's global batch (8 inputs, 4 targets).
inline std::pair<::torch::Tensor, ::torch::Tensor> local_batch(
    int step, ::torch::ScalarType dtype = ::torch::kFloat32) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(500 + step);
  auto x = ::torch::randn({kGlobalBatch, 8}, g).to(dtype);
  auto y = ::torch::randn({kGlobalBatch, 4}, g).to(dtype);
  const int64_t rows = kGlobalBatch / lockstep::torch::size();
  const int64_t first = lockstep::torch::rank() * rows;
  return {x.narrow(0, first, rows), y.narrow(0, first, rows)};
}

inline double relative_error(const ::torch::Tensor& actual, const ::torch::Tensor& expected) {
  return ((actual - expected).abs().max() / expected.abs().max()).item<double>();
}

}  // namespace lockstep::parallel::testing
