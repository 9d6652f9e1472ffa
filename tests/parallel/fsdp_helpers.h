// Shared by the FullyShardedModel tests (the Sequential path and the module
// path): the optimizers they compare, each rank's rows of a step's global
// batch, the relative error they bound, the mixed-precision recipe by hand
// and a checkpoint folder.
#pragma once

#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/optim/lamb.h"
#include "lockstep/torch/torch.h"
#include "torch/helpers.h"

namespace lockstep::parallel::testing {

constexpr int64_t kGlobalBatch = 8;

inline std::unique_ptr<::torch::optim::Optimizer> make_optimizer(
    const std::string& kind, std::vector<::torch::Tensor> params) {
  if (kind == "adam")
    return std::make_unique<::torch::optim::Adam>(params, ::torch::optim::AdamOptions(0.01));
  if (kind == "lamb")
    return std::make_unique<optim::Lamb>(params, optim::LambOptions(0.01).weight_decay(0.01));
  return std::make_unique<::torch::optim::SGD>(params,
                                               ::torch::optim::SGDOptions(0.05).momentum(0.9));
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

// The mixed-precision recipe written out by hand on whole replicas, the
// reference for compute_dtype = bf16: each step a bf16 copy of the f32
// master model (make() builds either, the same values), forward from the
// input cast to bf16 and backward, the gradients cast to f32 and averaged
// over the ranks, Adam on the masters. The masters' flat values after
// `steps` steps of local_batch.
template <class MakeModel>
::torch::Tensor mixed_precision_by_hand(MakeModel make, int steps, const std::string& name) {
  auto master = make();
  ::torch::optim::Adam reference(master->parameters(), 0.01);
  for (int s = 0; s < steps; ++s) {
    auto half = make();
    {
      ::torch::NoGradGuard no_grad;
      for (size_t i = 0; i < half->parameters().size(); ++i)
        half->parameters()[i].copy_(master->parameters()[i]);
    }
    half->to(::torch::kBFloat16);
    auto [x, y] = local_batch(s);
    ::torch::nn::functional::mse_loss(half->forward(x.to(::torch::kBFloat16)).to(::torch::kFloat32),
                                      y)
        .backward();
    reference.zero_grad();
    for (size_t i = 0; i < half->parameters().size(); ++i)
      master->parameters()[i].mutable_grad() = lockstep::torch::allreduce(
          half->parameters()[i].grad().to(::torch::kFloat32), name + "." + std::to_string(i));
    reference.step();
  }
  return lockstep::torch::testing::flat_parameters(*master);
}

// A fresh folder for a test's checkpoint, removed with this object.
class CheckpointDir {
 public:
  explicit CheckpointDir(const std::string& tag)
      : dir_(std::filesystem::temp_directory_path() /
             ("lockstep-" + tag + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
  }
  ~CheckpointDir() { std::filesystem::remove_all(dir_); }
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;
  std::string path() const { return (dir_ / "checkpoint.pt").string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace lockstep::parallel::testing
