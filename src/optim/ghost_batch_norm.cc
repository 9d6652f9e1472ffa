#include "lockstep/optim/ghost_batch_norm.h"

#include <torch/nn/init.h>
#include <torch/nn/module.h>

#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "lockstep/base/error.h"

namespace lockstep::optim {

::torch::Tensor ghost_batch_norm(const ::torch::Tensor& x, const ::torch::Tensor& weight,
                                 const ::torch::Tensor& bias, ::torch::Tensor running_mean,
                                 ::torch::Tensor running_var,
                                 const GhostBatchNormOptions& options) {
  const bool cudnn = x.is_cuda();
  std::vector<::torch::Tensor> out;
  // Each at::batch_norm call folds its chunk into the running buffers, so
  // the buffers see the chunks in order.
  for (const auto& chunk : x.split(options.virtual_batch_size(), 0)) {
    // One value per channel has no unbiased variance; torch's BatchNorm
    // refuses it too rather than poisoning running_var.
    if (chunk.numel() == chunk.size(1))
      throw InvalidArgument(fmt::format(
          "GhostBatchNorm: a ghost batch of {} samples leaves one value per channel; pick a "
          "virtual_batch_size that does not leave a single-sample remainder",
          chunk.size(0)));
    out.push_back(::at::batch_norm(chunk, weight, bias, running_mean, running_var,
                                   /*training=*/true, options.momentum(), options.eps(), cudnn));
  }
  return out.size() == 1 ? out.front() : ::torch::cat(out, 0);
}

void GhostBatchNormImplBase::validate() const {
  if (options.num_features() <= 0)
    throw InvalidArgument(
        fmt::format("GhostBatchNorm: num_features = {} must be positive", options.num_features()));
  if (options.virtual_batch_size() <= 0)
    throw InvalidArgument(fmt::format("GhostBatchNorm: virtual_batch_size = {} must be positive",
                                      options.virtual_batch_size()));
  if (!(options.eps() > 0) || !(options.momentum() >= 0 && options.momentum() <= 1))
    throw InvalidArgument(
        fmt::format("GhostBatchNorm: eps = {} (want > 0) or momentum = {} "
                    "(want [0, 1]) is invalid",
                    options.eps(), options.momentum()));
}

void GhostBatchNormImplBase::init(::torch::nn::Module& self) {
  validate();
  const int64_t c = options.num_features();
  if (options.affine()) {
    weight = self.register_parameter("weight", ::torch::ones({c}));
    bias = self.register_parameter("bias", ::torch::zeros({c}));
  } else {
    weight = self.register_parameter("weight", ::torch::Tensor(), /*requires_grad=*/false);
    bias = self.register_parameter("bias", ::torch::Tensor(), /*requires_grad=*/false);
  }
  running_mean = self.register_buffer("running_mean", ::torch::zeros({c}));
  running_var = self.register_buffer("running_var", ::torch::ones({c}));
  num_batches_tracked =
      self.register_buffer("num_batches_tracked", ::torch::zeros({}, ::torch::kLong));
}

::torch::Tensor GhostBatchNormImplBase::run(const ::torch::Tensor& x, bool training,
                                            const char* name, int64_t min_dim, int64_t max_dim) {
  if (x.dim() < min_dim || x.dim() > max_dim || x.size(1) != options.num_features())
    throw InvalidArgument(
        fmt::format("{}: input of shape {} does not have {}-{} dims with {} "
                    "channels in dim 1",
                    name, fmt::join(x.sizes(), "x"), min_dim, max_dim, options.num_features()));
  if (!training)
    return ::at::batch_norm(x, weight, bias, running_mean, running_var, /*training=*/false,
                            options.momentum(), options.eps(), x.is_cuda());
  const int64_t chunks =
      (x.size(0) + options.virtual_batch_size() - 1) / options.virtual_batch_size();
  {
    ::torch::NoGradGuard no_grad;
    num_batches_tracked.add_(chunks);
  }
  return ghost_batch_norm(x, weight, bias, running_mean, running_var, options);
}

void GhostBatchNormImplBase::print(std::ostream& stream, const char* name) const {
  stream << fmt::format(
      "lockstep::optim::{}({}, virtual_batch_size={}, eps={}, momentum={}, "
      "affine={})",
      name, options.num_features(), options.virtual_batch_size(), options.eps(), options.momentum(),
      options.affine());
}

}  // namespace lockstep::optim
