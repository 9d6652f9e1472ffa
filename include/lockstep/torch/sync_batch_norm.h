// SyncBatchNorm: batch normalisation whose batch statistics are computed over
// the global batch (all ranks), as PyTorch's nn.SyncBatchNorm.
//
// Training forward allreduces per-channel [sum, sum of squares, count] (one
// fused f64 tensor); backward allreduces per-channel [sum(dy),
// sum(dy * (x - mean))] so the input gradient is the one of BatchNorm on the
// concatenated batch. Weight and bias gradients stay local (each rank's share):
// DistributedOptimizer then reduces them like any other gradient. Eval mode
// uses the running statistics and communicates nothing; so does a
// single-process job. Every rank must run forward/backward of the same
// layers in the same order (the allreduces are named per layer instance).
// Accepts any input of shape [N, C, ...] (BatchNorm1d/2d/3d layouts).
// `group` (default: every rank) limits the statistics to a subset, e.g. the
// data-parallel replicas of one pipeline stage.
//
// Thread-safety: as any torch module, none; forward/backward of one
// instance run on the training thread (their allreduces are collectives).
#pragma once

#include <torch/torch.h>

#include <string>

#include "lockstep/torch/group.h"

namespace lockstep::torch {

class SyncBatchNormImpl : public ::torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  explicit SyncBatchNormImpl(::torch::nn::BatchNormOptions options, Group group = {});
  explicit SyncBatchNormImpl(int64_t num_features)
      : SyncBatchNormImpl(::torch::nn::BatchNormOptions(num_features)) {}

  void reset() override;
  ::torch::Tensor forward(const ::torch::Tensor& input);
  void pretty_print(std::ostream& stream) const override;

  ::torch::nn::BatchNormOptions options;
  Group group;
  ::torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  std::string name_;  // collective names, unique per instance and equal across ranks
};
// TORCH_MODULE spelled out: the macro names torch::nn, which inside this
// namespace would mean lockstep::torch::nn.
class SyncBatchNorm : public ::torch::nn::ModuleHolder<SyncBatchNormImpl> {
 public:
  using ::torch::nn::ModuleHolder<SyncBatchNormImpl>::ModuleHolder;
  using Impl = SyncBatchNormImpl;
};

// A SyncBatchNorm with `bn`'s options, parameters and running statistics.
SyncBatchNorm to_sync_batch_norm(const ::torch::nn::BatchNorm2dImpl& bn);
// A copy of `sequential` (sharing its other modules) with every
// BatchNorm2d replaced by a SyncBatchNorm carrying its state. Modules that
// call their BatchNorm2d members directly cannot be rewritten from outside:
// build them with SyncBatchNorm instead (FashionCnnOptions::make_norm).
::torch::nn::Sequential convert_sync_batch_norm(const ::torch::nn::Sequential& sequential);

}  // namespace lockstep::torch
