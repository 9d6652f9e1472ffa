// LAMB (You et al., arXiv 1904.00962) as a torch::optim::Optimizer.
//
// Convention (docs/optim.md): per parameter tensor x with gradient g, step t,
//   m ← β1·m + (1−β1)·g,   v ← β2·v + (1−β2)·g²
//   m̂ = m/(1−β1^t), v̂ = v/(1−β2^t)      (without bias_correction: m̂ = m, v̂ = v)
//   r = m̂/(√v̂ + ε),   u = r + λ·x        (decoupled, AdamW-style decay λ)
//   trust = ‖x‖/‖u‖ (1 when either norm is 0), capped at max_trust_ratio if > 0
//   x ← x − lr·trust·u
// φ is the identity, as in the paper's experiments. Options are per group;
// state (step, m, v) saves and loads with torch::save / torch::load; each
// step's trust ratio is kept in the state too (LambParamState::trust_ratio).
//
// Thread-safety: as torch::optim's optimizers, none; step() and the
// param_groups() it reads belong to one thread at a time.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>

#include <vector>

namespace lockstep::optim {

struct LambOptions : public ::torch::optim::OptimizerCloneableOptions<LambOptions> {
  LambOptions(double lr = 1e-3);  // NOLINT: implicit like AdamOptions
  TORCH_ARG(double, lr);
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(bool, bias_correction) = true;
  TORCH_ARG(double, max_trust_ratio) = 0;  // 0: no cap

 public:
  void serialize(::torch::serialize::InputArchive& archive) override;
  void serialize(::torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
  // Throws lockstep::InvalidArgument naming the bad option.
  void validate() const;
};

struct LambParamState : public ::torch::optim::OptimizerCloneableParamState<LambParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(::torch::Tensor, exp_avg);
  TORCH_ARG(::torch::Tensor, exp_avg_sq);
  // The trust ratio the last step applied (0-dim, on the parameter's
  // device); not saved. 1-bit LAMB (lockstep/torch/onebit_lamb.h) averages
  // it over its warm-up.
  TORCH_ARG(::torch::Tensor, trust_ratio);

 public:
  void serialize(::torch::serialize::InputArchive& archive) override;
  void serialize(::torch::serialize::OutputArchive& archive) const override;
};

// LAMB's trust ratio of update u for parameter x: ‖x‖/‖u‖ (1 when a norm
// is 0), capped at max_trust_ratio when that is set. A 0-dim tensor on x's
// device (no host sync). Lamb::step and 1-bit LAMB both apply it.
::torch::Tensor lamb_trust_ratio(const ::torch::Tensor& x, const ::torch::Tensor& u,
                                 const LambOptions& o);

class Lamb : public ::torch::optim::Optimizer {
 public:
  Lamb(std::vector<::torch::optim::OptimizerParamGroup> groups, LambOptions defaults);
  Lamb(std::vector<::torch::Tensor> params, LambOptions defaults)
      : Lamb({::torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  ::torch::Tensor step(LossClosure closure = nullptr) override;
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

 private:
  template <typename Self, typename Archive>
  static void serialize(Self& self, Archive& archive) {
    ::torch::optim::serialize<LambParamState, LambOptions>(archive, self);
  }
};

}  // namespace lockstep::optim
