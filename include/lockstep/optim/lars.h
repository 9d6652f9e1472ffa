// LARS: layer-wise adaptive rate scaling (You, Gitman, Ginsburg, arXiv
// 1708.03888), as a torch::optim::Optimizer.
//
// Per parameter tensor w with gradient g:
//   λ = η‖w‖ / (‖g‖ + β‖w‖)          (λ = 1 when ‖w‖ = 0 or ‖g‖ = 0)
//   v ← m·v + γ·λ·(g + βw),   w ← w − v
// with trust coefficient η, weight decay β, momentum m and learning rate γ.
// With exclude_1d, tensors of at most one dimension (biases, norm scales) skip
// both the decay and the adaptation: v ← m·v + γ·g. Options are per
// parameter group; state (the momentum buffer) saves and loads with
// torch::save / torch::load, so it broadcasts and checkpoints.
//
// Thread-safety: as torch::optim's optimizers, none; step() and the
// param_groups() it reads belong to one thread at a time.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>

#include <vector>

namespace lockstep::optim {

struct LarsOptions : public ::torch::optim::OptimizerCloneableOptions<LarsOptions> {
  LarsOptions(double lr = 0.1);  // NOLINT: implicit like SGDOptions
  TORCH_ARG(double, lr);
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(double, trust_coefficient) = 0.001;
  TORCH_ARG(bool, exclude_1d) = false;

 public:
  void serialize(::torch::serialize::InputArchive& archive) override;
  void serialize(::torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
  // Throws lockstep::InvalidArgument naming the bad option.
  void validate() const;
};

struct LarsParamState : public ::torch::optim::OptimizerCloneableParamState<LarsParamState> {
  TORCH_ARG(::torch::Tensor, momentum_buffer);

 public:
  void serialize(::torch::serialize::InputArchive& archive) override;
  void serialize(::torch::serialize::OutputArchive& archive) const override;
};

class Lars : public ::torch::optim::Optimizer {
 public:
  Lars(std::vector<::torch::optim::OptimizerParamGroup> groups, LarsOptions defaults);
  Lars(std::vector<::torch::Tensor> params, LarsOptions defaults)
      : Lars({::torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  ::torch::Tensor step(LossClosure closure = nullptr) override;
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

 private:
  template <typename Self, typename Archive>
  static void serialize(Self& self, Archive& archive) {
    ::torch::optim::serialize<LarsParamState, LarsOptions>(archive, self);
  }
};

}  // namespace lockstep::optim
