#include "lockstep/torch/sync_batch_norm.h"

#include <fmt/format.h>

#include <atomic>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::torch {
namespace {

using ::torch::Tensor;
using ::torch::autograd::AutogradContext;
using ::torch::autograd::variable_list;

std::vector<int64_t> reduce_dims(const Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

std::vector<int64_t> channel_shape(const Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = x.size(1);
  return shape;
}

// Sums of several per-channel tensors over every rank, in f64 in one message.
std::vector<Tensor> global_sums(const std::vector<Tensor>& parts, const std::string& name,
                                int process_set) {
  Tensor packed = ::torch::cat(parts).to(::torch::kFloat64);
  allreduce_(packed, name, {.op = ReduceOp::kSum, .process_set = process_set});
  std::vector<int64_t> sizes;
  for (const auto& p : parts) sizes.push_back(p.numel());
  return packed.split_with_sizes(sizes);
}

struct SyncBatchNormFunction : public ::torch::autograd::Function<SyncBatchNormFunction> {
  static Tensor forward(AutogradContext* ctx, Tensor x, Tensor weight, Tensor bias,
                        Tensor running_mean, Tensor running_var, double eps, double momentum,
                        std::string name, int64_t process_set) {
    auto dims = reduce_dims(x);
    const int64_t channels = x.size(1);
    auto count = ::torch::full({1}, static_cast<double>(x.numel() / channels), ::torch::kFloat64);
    auto sums = global_sums({x.sum(dims), (x * x).sum(dims), count}, name + ".stats",
                            static_cast<int>(process_set));
    const double m = sums[2].item<double>();
    auto mean = sums[0] / m;
    auto var = (sums[1] / m - mean * mean).clamp_min(0);
    auto invstd = (var + eps).rsqrt();
    if (running_mean.defined()) {
      ::torch::NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype()), momentum);
      auto unbiased = m > 1 ? var * (m / (m - 1)) : var;
      running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype()), momentum);
    }
    auto shape = channel_shape(x);
    auto mean_x = mean.to(x.dtype()).view(shape);
    auto invstd_x = invstd.to(x.dtype()).view(shape);
    ctx->save_for_backward({x, weight, mean_x, invstd_x});
    ctx->saved_data["count"] = m;
    ctx->saved_data["name"] = name;
    ctx->saved_data["process_set"] = process_set;
    return (x - mean_x) * invstd_x * weight.view(shape) + bias.view(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    Tensor x = saved[0], weight = saved[1], mean = saved[2], invstd = saved[3];
    const double m = ctx->saved_data["count"].toDouble();
    const std::string name = ctx->saved_data["name"].toStringRef();
    Tensor dy = grads[0].contiguous();
    auto dims = reduce_dims(x);
    auto shape = channel_shape(x);
    Tensor xmu = x - mean;
    Tensor sum_dy = dy.sum(dims);
    Tensor sum_dy_xmu = (dy * xmu).sum(dims);
    auto global = global_sums({sum_dy, sum_dy_xmu}, name + ".grad",
                              static_cast<int>(ctx->saved_data["process_set"].toInt()));
    auto mean_dy = (global[0] / m).to(x.dtype()).view(shape);
    auto mean_dy_xmu = (global[1] / m).to(x.dtype()).view(shape);
    Tensor dx = weight.view(shape) * invstd * (dy - mean_dy - xmu * invstd * invstd * mean_dy_xmu);
    Tensor grad_weight = sum_dy_xmu * invstd.view({-1});
    return {dx, grad_weight, sum_dy, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

std::string next_instance_name() {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("sync_bn.{}", counter++);
}

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(::torch::nn::BatchNormOptions options_, Group group_)
    : options(std::move(options_)), group(std::move(group_)) {
  reset();
}

void SyncBatchNormImpl::reset() {
  name_ = next_instance_name();
  const int64_t c = options.num_features();
  weight = register_parameter("weight", ::torch::ones({c}), options.affine());
  bias = register_parameter("bias", ::torch::zeros({c}), options.affine());
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", ::torch::zeros({c}));
    running_var = register_buffer("running_var", ::torch::ones({c}));
    num_batches_tracked =
        register_buffer("num_batches_tracked", ::torch::zeros({}, ::torch::kLong));
  }
}

::torch::Tensor SyncBatchNormImpl::forward(const ::torch::Tensor& input) {
  if (input.dim() < 2 || input.size(1) != options.num_features())
    throw InvalidArgument(fmt::format("SyncBatchNorm: expected input [N, {}, ...], got {}",
                                      options.num_features(), c10::str(input.sizes())));
  const bool use_batch_stats = is_training() || !options.track_running_stats();
  double momentum = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats()) {
    ::torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    if (!options.momentum()) momentum = 1.0 / num_batches_tracked.item<double>();
  }
  if (!use_batch_stats || group.size() == 1) {
    return ::torch::batch_norm(input, weight, bias, running_mean, running_var, use_batch_stats,
                               momentum, options.eps(), /*cudnn_enabled=*/false);
  }
  Tensor rm = is_training() ? running_mean : Tensor();
  Tensor rv = is_training() ? running_var : Tensor();
  return SyncBatchNormFunction::apply(input, weight, bias, rm, rv, options.eps(), momentum, name_,
                                      static_cast<int64_t>(group.id()));
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "lockstep::torch::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps()
         << ", affine=" << options.affine() << ")";
}

SyncBatchNorm to_sync_batch_norm(const ::torch::nn::BatchNorm2dImpl& bn) {
  ::torch::nn::BatchNormOptions o(bn.options.num_features());
  o.eps(bn.options.eps())
      .momentum(bn.options.momentum())
      .affine(bn.options.affine())
      .track_running_stats(bn.options.track_running_stats());
  SyncBatchNorm sync(o);
  ::torch::NoGradGuard no_grad;
  if (bn.options.affine()) {
    sync->weight.copy_(bn.weight);
    sync->bias.copy_(bn.bias);
  }
  if (bn.options.track_running_stats()) {
    sync->running_mean.copy_(bn.running_mean);
    sync->running_var.copy_(bn.running_var);
    sync->num_batches_tracked.copy_(bn.num_batches_tracked);
  }
  return sync;
}

::torch::nn::Sequential convert_sync_batch_norm(const ::torch::nn::Sequential& sequential) {
  ::torch::nn::Sequential out;
  auto names = sequential->named_children().keys();
  size_t i = 0;
  for (const ::torch::nn::AnyModule& any : *sequential) {
    const std::string& name = names.at(i++);
    auto child = any.ptr();
    if (auto bn = std::dynamic_pointer_cast<::torch::nn::BatchNorm2dImpl>(child)) {
      out->push_back(name, ::torch::nn::AnyModule(to_sync_batch_norm(*bn)));
    } else {
      out->push_back(name, any);  // shared, not copied
    }
  }
  return out;
}

}  // namespace lockstep::torch
