#include "lockstep/optim/lamb.h"

#include <cmath>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "optim/param_state.h"

namespace lockstep::optim {

LambOptions::LambOptions(double lr) : lr_(lr) {}

void LambOptions::validate() const {
  auto check = [](bool ok, const char* what, double v) {
    if (!ok) throw InvalidArgument(fmt::format("LAMB: {} = {} is invalid", what, v));
  };
  check(std::isfinite(lr()) && lr() >= 0, "lr", lr());
  check(beta1() >= 0 && beta1() < 1, "beta1 (want [0, 1))", beta1());
  check(beta2() >= 0 && beta2() < 1, "beta2 (want [0, 1))", beta2());
  check(eps() > 0, "eps", eps());
  check(weight_decay() >= 0, "weight_decay", weight_decay());
  check(max_trust_ratio() >= 0, "max_trust_ratio", max_trust_ratio());
}

void LambOptions::serialize(::torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(beta1);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(beta2);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(bias_correction);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(max_trust_ratio);
}

void LambOptions::serialize(::torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, beta1);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, beta2);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, bias_correction);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, max_trust_ratio);
}

void LambParamState::serialize(::torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
}

void LambParamState::serialize(::torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(::torch::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(::torch::Tensor, exp_avg_sq);
}

::torch::Tensor lamb_trust_ratio(const ::torch::Tensor& x, const ::torch::Tensor& u,
                                 const LambOptions& o) {
  auto xn = x.norm(), un = u.norm();
  auto trust = ::torch::where(detail::both_positive(xn, un), xn / un, ::torch::ones_like(xn));
  return o.max_trust_ratio() > 0 ? trust.clamp_max(o.max_trust_ratio()) : trust;
}

Lamb::Lamb(std::vector<::torch::optim::OptimizerParamGroup> groups, LambOptions defaults)
    : Optimizer(std::move(groups), std::make_unique<LambOptions>(defaults)) {
  // Groups may carry their own options; each must be valid, not just the defaults.
  defaults.validate();
  for (auto& group : param_groups_) static_cast<LambOptions&>(group.options()).validate();
}

::torch::Tensor Lamb::step(LossClosure closure) {
  ::torch::NoGradGuard no_grad;
  ::torch::Tensor loss = detail::evaluate_closure(closure);
  for (auto& group : param_groups_) {
    auto& o = static_cast<LambOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto& g = p.grad();
      auto& s = detail::param_state<LambParamState>(*this, p, [&](LambParamState& fresh) {
        fresh.exp_avg(::torch::zeros_like(p)).exp_avg_sq(::torch::zeros_like(p));
      });
      s.step(s.step() + 1);
      s.exp_avg().mul_(o.beta1()).add_(g, 1 - o.beta1());
      s.exp_avg_sq().mul_(o.beta2()).addcmul_(g, g, 1 - o.beta2());
      double c1 = 1, c2 = 1;
      if (o.bias_correction()) {
        c1 = 1 - std::pow(o.beta1(), static_cast<double>(s.step()));
        c2 = 1 - std::pow(o.beta2(), static_cast<double>(s.step()));
      }
      auto update = (s.exp_avg() / c1) / ((s.exp_avg_sq() / c2).sqrt() + o.eps());
      if (o.weight_decay() != 0) update.add_(p, o.weight_decay());
      s.trust_ratio(lamb_trust_ratio(p, update, o));
      p.sub_(update.mul_(s.trust_ratio()), o.lr());
    }
  }
  return loss;
}

void Lamb::save(::torch::serialize::OutputArchive& archive) const { serialize(*this, archive); }
void Lamb::load(::torch::serialize::InputArchive& archive) { serialize(*this, archive); }

}  // namespace lockstep::optim
