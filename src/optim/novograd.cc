#include "lockstep/optim/novograd.h"

#include <cmath>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "optim/param_state.h"

namespace lockstep::optim {

NovoGradOptions::NovoGradOptions(double lr) : lr_(lr) {}

void NovoGradOptions::validate() const {
  auto check = [](bool ok, const char* what, double v) {
    if (!ok) throw InvalidArgument(fmt::format("NovoGrad: {} = {} is invalid", what, v));
  };
  check(std::isfinite(lr()) && lr() >= 0, "lr", lr());
  check(beta1() >= 0 && beta1() < 1, "beta1 (want [0, 1))", beta1());
  check(beta2() >= 0 && beta2() < 1, "beta2 (want [0, 1))", beta2());
  check(eps() > 0, "eps", eps());
  check(weight_decay() >= 0, "weight_decay", weight_decay());
}

void NovoGradOptions::serialize(::torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(beta1);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(beta2);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(grad_averaging);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(amsgrad);
}

void NovoGradOptions::serialize(::torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, beta1);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, beta2);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, grad_averaging);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, amsgrad);
}

void NovoGradParamState::serialize(::torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(max_exp_avg_sq);
}

void NovoGradParamState::serialize(::torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(::torch::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(::torch::Tensor, exp_avg_sq);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(::torch::Tensor, max_exp_avg_sq);
}

NovoGrad::NovoGrad(std::vector<::torch::optim::OptimizerParamGroup> groups,
                   NovoGradOptions defaults)
    : Optimizer(std::move(groups), std::make_unique<NovoGradOptions>(defaults)) {
  // Groups may carry their own options; each must be valid, not just the defaults.
  defaults.validate();
  for (auto& group : param_groups_) static_cast<NovoGradOptions&>(group.options()).validate();
}

namespace {

// Updates v (and v̂) from ‖g‖² and returns the denominator √v̂ + ε.
::torch::Tensor second_moment(NovoGradParamState& s, const ::torch::Tensor& g,
                              const NovoGradOptions& o) {
  auto sq_norm = g.square().sum();
  // The paper initialises v with the first squared norm instead of
  // averaging it with zero, so there is no bias to correct.
  if (s.step() == 1)
    s.exp_avg_sq().copy_(sq_norm);
  else
    s.exp_avg_sq().mul_(o.beta2()).add_(sq_norm, 1 - o.beta2());
  if (!o.amsgrad()) return s.exp_avg_sq().sqrt().add_(o.eps());
  if (!s.max_exp_avg_sq().defined()) s.max_exp_avg_sq(s.exp_avg_sq().clone());
  ::torch::maximum_out(s.max_exp_avg_sq(), s.max_exp_avg_sq(), s.exp_avg_sq());
  return s.max_exp_avg_sq().sqrt().add_(o.eps());
}

}  // namespace

::torch::Tensor NovoGrad::step(LossClosure closure) {
  ::torch::NoGradGuard no_grad;
  ::torch::Tensor loss = detail::evaluate_closure(closure);
  for (auto& group : param_groups_) {
    auto& o = static_cast<NovoGradOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& s = detail::param_state<NovoGradParamState>(*this, p, [&](NovoGradParamState& fresh) {
        fresh.exp_avg(::torch::zeros_like(p)).exp_avg_sq(::torch::zeros({}, p.options()));
      });
      s.step(s.step() + 1);
      auto u = p.grad() / second_moment(s, p.grad(), o);
      if (o.weight_decay() != 0) u.add_(p, o.weight_decay());
      s.exp_avg().mul_(o.beta1()).add_(u, o.grad_averaging() ? 1 - o.beta1() : 1.0);
      p.sub_(s.exp_avg(), o.lr());
    }
  }
  return loss;
}

void NovoGrad::save(::torch::serialize::OutputArchive& archive) const { serialize(*this, archive); }
void NovoGrad::load(::torch::serialize::InputArchive& archive) { serialize(*this, archive); }

}  // namespace lockstep::optim
