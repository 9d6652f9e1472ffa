// Activation checkpointing (gradient checkpointing, Chen et al. 2016):
// a segment of the network keeps only its input during forward and runs its
// forward a second time during backward to rebuild what backward needs, so
// activation memory falls from every layer's outputs to the segments'
// inputs plus one segment's activations, for one extra forward.
//
//   auto block = lp::Checkpointed(torch::nn::Sequential(Linear(512, 512), ReLU(),
//                                                         Dropout(0.1), Linear(512, 512)));
//   auto y = block->forward(x);        // keeps x only
//   y.sum().backward();                // recomputes the block, then backpropagates
//
// or, for any callable: lp::checkpoint(fn, x, module->parameters()).
//
// Exact: the recomputation replays the forward bit for bit: the CPU random
// generator (and the tensor's CUDA device's, on a CUDA build) is set back to
// its state at the forward, so dropout draws the same mask, and the autocast
// state (mixed precision) of the forward is restored; afterwards the
// generators continue where they were, as if nothing had been recomputed.
// So gradients equal the plain module's bit for bit (same thread count),
// provided the forward is deterministic given its inputs, parameters and RNG.
//
// How: a custom autograd Function whose inputs are the segment's input and
// `parameters` (so parameters get gradients even when the input does not
// require one, e.g. the first layer on raw data). Its forward runs under
// NoGradGuard; its backward re-runs the forward with grad enabled and takes
// the gradients of input and parameters with torch::autograd::grad, which
// the outer backward then accumulates as usual (gradient hooks, and so
// DistributedOptimizer's overlapped allreduce, fire as without checkpointing).
// Parameters the forward reads but that are not in `parameters` get no
// gradient: list them all. Buffers updated in forward (batch norm running
// statistics) are updated twice: the recomputation repeats the update.
//
// Memory kept per segment: its input, references to its parameters, and the
// CPU generator's state (5 KB; plus the CUDA one for CUDA inputs). Without
// grad mode, or with nothing requiring a gradient, the forward just runs
// (nothing to recompute). Thread-safety: as the wrapped forward.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lockstep::parallel {

using SegmentForward = std::function<::torch::Tensor(const ::torch::Tensor&)>;

// forward(input), keeping only `input` (and references to `parameters`) for
// backward. `forward` must stay callable until backward has run.
::torch::Tensor checkpoint(SegmentForward forward, const ::torch::Tensor& input,
                           std::vector<::torch::Tensor> parameters);
// A module with forward(Tensor) -> Tensor, its parameters() as `parameters`.
::torch::Tensor checkpoint(const ::torch::nn::AnyModule& module, const ::torch::Tensor& input);

// A module wrapper that checkpoints the wrapped module's forward. It is
// transparent for names: it holds the wrapped module's children, parameters
// and buffers under their own names, so named_parameters() and a saved model
// are the same with or without the wrapper (checkpoints load either way, and
// a Pipeline of wrapped layers names parameters as the plain model does).
// train()/eval() reach the wrapped module.
class CheckpointedImpl : public ::torch::nn::Module {
 public:
  template <typename ModuleType>
  explicit CheckpointedImpl(::torch::nn::ModuleHolder<ModuleType> module)
      : CheckpointedImpl(::torch::nn::AnyModule(std::move(module))) {}
  explicit CheckpointedImpl(::torch::nn::AnyModule module);
  // A Sequential's forward is a template, so AnyModule cannot hold one.
  explicit CheckpointedImpl(::torch::nn::Sequential module);
  // Any module, with the forward to checkpoint.
  CheckpointedImpl(std::shared_ptr<::torch::nn::Module> module, SegmentForward forward);

  ::torch::Tensor forward(const ::torch::Tensor& input);
  void train(bool on = true) override;
  void pretty_print(std::ostream& stream) const override;
  const std::shared_ptr<::torch::nn::Module>& wrapped() const { return module_; }

 private:
  std::shared_ptr<::torch::nn::Module> module_;
  SegmentForward forward_;
};
// TORCH_MODULE spelled out (the macro names torch::nn relative to this
// namespace, which is lockstep::torch where lockstep/torch is included).
class Checkpointed : public ::torch::nn::ModuleHolder<CheckpointedImpl> {
 public:
  using ::torch::nn::ModuleHolder<CheckpointedImpl>::ModuleHolder;
  using Impl = CheckpointedImpl;
};

// `model` with each run of `segment` consecutive layers checkpointed as one
// (the last run may be shorter). segment = 1 wraps each layer itself, so the
// names stay `model`'s; larger segments are Checkpointed Sequentials named
// by their index, so each name gains it in front (layer 3 in segment 1:
// "1.3.weight"). The layers are shared with `model`, not copied. Throws
// InvalidArgument for segment < 1.
::torch::nn::Sequential checkpoint_layers(const ::torch::nn::Sequential& model, int segment = 1);

}  // namespace lockstep::parallel
