// Ghost batch normalisation (Hoffer, Hubara, Soudry, "Train longer,
// generalize better", arXiv 1705.08741): batch norm whose training-time
// statistics come from "ghost" batches of virtual_batch_size samples, so a
// large batch keeps the regularising noise of small-batch statistics.
//
// Training: the input is split along dim 0 into chunks of
// virtual_batch_size (the last one may be smaller); each chunk is
// normalised with its own mean and biased variance, then the shared affine
// weight and bias apply. The running mean/var are updated from each chunk in
// order, exactly as k consecutive BatchNorm calls would (so with k chunks a
// batch moves them by 1−(1−momentum)^k); num_batches_tracked counts chunks.
// The running variance uses the unbiased chunk variance, as torch does;
// a ghost batch with one value per channel (unbiased variance undefined)
// throws lockstep::InvalidArgument, as BatchNorm refuses it. Evaluation: the running statistics,
// like BatchNorm.
//
// Drop-in for torch::nn::BatchNorm{1,2}d: same parameter and buffer names
// (weight, bias, running_mean, running_var, num_batches_tracked), so state
// dicts and checkpoints carry over. Like any torch module, not thread-safe.
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <ostream>

namespace lockstep::optim {

struct GhostBatchNormOptions {
  GhostBatchNormOptions(int64_t num_features, int64_t virtual_batch_size)  // NOLINT
      : num_features_(num_features), virtual_batch_size_(virtual_batch_size) {}
  TORCH_ARG(int64_t, num_features);
  TORCH_ARG(int64_t, virtual_batch_size);
  TORCH_ARG(double, eps) = 1e-5;
  TORCH_ARG(double, momentum) = 0.1;
  TORCH_ARG(bool, affine) = true;
};

// The training-mode computation on its own: x is [N, C, ...]; updates
// running_mean/var (if defined) chunk by chunk. weight/bias may be undefined.
::torch::Tensor ghost_batch_norm(const ::torch::Tensor& x, const ::torch::Tensor& weight,
                                 const ::torch::Tensor& bias, ::torch::Tensor running_mean,
                                 ::torch::Tensor running_var, const GhostBatchNormOptions& options);

// Shared by the 1-D and 2-D modules, which differ only in the input rank.
class GhostBatchNormImplBase {
 public:
  ::torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  GhostBatchNormOptions options;

 protected:
  explicit GhostBatchNormImplBase(GhostBatchNormOptions o) : options(o) {}
  void validate() const;
  void init(::torch::nn::Module& self);
  ::torch::Tensor run(const ::torch::Tensor& x, bool training, const char* name, int64_t min_dim,
                      int64_t max_dim);
  void print(std::ostream& stream, const char* name) const;
};

// Input [N, C, H, W].
class GhostBatchNorm2dImpl : public ::torch::nn::Cloneable<GhostBatchNorm2dImpl>,
                             public GhostBatchNormImplBase {
 public:
  explicit GhostBatchNorm2dImpl(GhostBatchNormOptions o) : GhostBatchNormImplBase(o) { reset(); }
  void reset() override { init(*this); }
  ::torch::Tensor forward(const ::torch::Tensor& x) {
    return run(x, is_training(), "GhostBatchNorm2d", 4, 4);
  }
  void pretty_print(std::ostream& stream) const override { print(stream, "GhostBatchNorm2d"); }
};
// TORCH_MODULE spelled out: the macro names torch::nn, which inside this
// namespace means lockstep::torch::nn wherever lockstep::torch is declared
// first (a unity batch, a program that includes lockstep/torch first).
class GhostBatchNorm2d : public ::torch::nn::ModuleHolder<GhostBatchNorm2dImpl> {
 public:
  using ::torch::nn::ModuleHolder<GhostBatchNorm2dImpl>::ModuleHolder;
  using Impl = GhostBatchNorm2dImpl;
};

// Input [N, C] or [N, C, L].
class GhostBatchNorm1dImpl : public ::torch::nn::Cloneable<GhostBatchNorm1dImpl>,
                             public GhostBatchNormImplBase {
 public:
  explicit GhostBatchNorm1dImpl(GhostBatchNormOptions o) : GhostBatchNormImplBase(o) { reset(); }
  void reset() override { init(*this); }
  ::torch::Tensor forward(const ::torch::Tensor& x) {
    return run(x, is_training(), "GhostBatchNorm1d", 2, 3);
  }
  void pretty_print(std::ostream& stream) const override { print(stream, "GhostBatchNorm1d"); }
};
class GhostBatchNorm1d
    : public ::torch::nn::ModuleHolder<GhostBatchNorm1dImpl> {  // as GhostBatchNorm2d
 public:
  using ::torch::nn::ModuleHolder<GhostBatchNorm1dImpl>::ModuleHolder;
  using Impl = GhostBatchNorm1dImpl;
};

}  // namespace lockstep::optim
