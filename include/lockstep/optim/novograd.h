// NovoGrad (Ginsburg et al., arXiv 1905.11286) as a torch::optim::Optimizer:
// Adam-like, but the second moment is one scalar per tensor (layer).
//
// Convention (docs/optim.md), per parameter tensor w with gradient g, step t:
//   v ← ‖g‖²                          at t = 1
//   v ← β2·v + (1−β2)·‖g‖²            after
//   v̂ = max over steps of v           with amsgrad, else v̂ = v
//   u = g/(√v̂ + ε) + d·w              (ε outside the root; d = weight_decay)
//   m ← β1·m + c·u,  c = 1−β1 with grad_averaging, else 1   (m starts at 0)
//   w ← w − lr·m
// This is NVIDIA's reference (Jasper's novograd.py and apex FusedNovoGrad):
// grad_averaging scales the whole u, decay term included. No bias
// correction. Options are per group; state (step, m, v, v̂) saves and loads
// with torch::save / torch::load. v stays a 0-dim tensor on w's device, so
// a step needs no host sync.
//
// Thread-safety: as torch::optim's optimizers, none; step() and the
// param_groups() it reads belong to one thread at a time.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>

#include <vector>

namespace lockstep::optim {

struct NovoGradOptions : public ::torch::optim::OptimizerCloneableOptions<NovoGradOptions> {
  NovoGradOptions(double lr = 1e-3);  // NOLINT: implicit like AdamOptions
  TORCH_ARG(double, lr);
  TORCH_ARG(double, beta1) = 0.95;
  TORCH_ARG(double, beta2) = 0.98;
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(bool, grad_averaging) = false;
  TORCH_ARG(bool, amsgrad) = false;

 public:
  void serialize(::torch::serialize::InputArchive& archive) override;
  void serialize(::torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
  // Throws lockstep::InvalidArgument naming the bad option.
  void validate() const;
};

struct NovoGradParamState
    : public ::torch::optim::OptimizerCloneableParamState<NovoGradParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(::torch::Tensor, exp_avg);         // m, shaped like w
  TORCH_ARG(::torch::Tensor, exp_avg_sq);      // v, 0-dim
  TORCH_ARG(::torch::Tensor, max_exp_avg_sq);  // v̂, 0-dim; amsgrad only

 public:
  void serialize(::torch::serialize::InputArchive& archive) override;
  void serialize(::torch::serialize::OutputArchive& archive) const override;
};

class NovoGrad : public ::torch::optim::Optimizer {
 public:
  NovoGrad(std::vector<::torch::optim::OptimizerParamGroup> groups, NovoGradOptions defaults);
  NovoGrad(std::vector<::torch::Tensor> params, NovoGradOptions defaults)
      : NovoGrad({::torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  ::torch::Tensor step(LossClosure closure = nullptr) override;
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

 private:
  template <typename Self, typename Archive>
  static void serialize(Self& self, Archive& archive) {
    ::torch::optim::serialize<NovoGradParamState, NovoGradOptions>(archive, self);
  }
};

}  // namespace lockstep::optim
