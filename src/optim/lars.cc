#include "lockstep/optim/lars.h"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "optim/param_state.h"

namespace lockstep::optim {

LarsOptions::LarsOptions(double lr) : lr_(lr) {}

void LarsOptions::validate() const {
  auto check = [](bool ok, const char* what, double v) {
    if (!ok) throw InvalidArgument(fmt::format("LARS: {} = {} is invalid", what, v));
  };
  check(std::isfinite(lr()) && lr() >= 0, "lr", lr());
  check(momentum() >= 0 && momentum() < 1, "momentum (want [0, 1))", momentum());
  check(weight_decay() >= 0, "weight_decay", weight_decay());
  check(trust_coefficient() > 0, "trust_coefficient", trust_coefficient());
}

void LarsOptions::serialize(::torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(trust_coefficient);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exclude_1d);
}

void LarsOptions::serialize(::torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, momentum);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, trust_coefficient);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, exclude_1d);
}

void LarsParamState::serialize(::torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum_buffer);
}

void LarsParamState::serialize(::torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(::torch::Tensor, momentum_buffer);
}

namespace {

// λ·(g + βw), λ = η‖w‖/(‖g‖ + β‖w‖), or 1 when a norm is 0. Tensor ops
// only: no .item(), so no host sync per parameter on a GPU.
::torch::Tensor adapted_gradient(const ::torch::Tensor& p, const ::torch::Tensor& g,
                                 const LarsOptions& o) {
  auto wn = p.norm(), gn = g.norm();
  auto local = ::torch::where(detail::both_positive(wn, gn),
                              o.trust_coefficient() * wn / (gn + o.weight_decay() * wn),
                              ::torch::ones_like(wn));
  auto decayed = o.weight_decay() != 0 ? g.add(p, o.weight_decay()) : g;
  return decayed * local;
}

}  // namespace

Lars::Lars(std::vector<::torch::optim::OptimizerParamGroup> groups, LarsOptions defaults)
    : Optimizer(std::move(groups), std::make_unique<LarsOptions>(defaults)) {
  // Groups may carry their own options; each must be valid, not just the defaults.
  defaults.validate();
  for (auto& group : param_groups_) static_cast<LarsOptions&>(group.options()).validate();
}

::torch::Tensor Lars::step(LossClosure closure) {
  ::torch::NoGradGuard no_grad;
  ::torch::Tensor loss = detail::evaluate_closure(closure);
  for (auto& group : param_groups_) {
    auto& o = static_cast<LarsOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& s = detail::param_state<LarsParamState>(
          *this, p, [&](LarsParamState& fresh) { fresh.momentum_buffer(::torch::zeros_like(p)); });
      ::torch::Tensor g = p.grad();
      if (!o.exclude_1d() || p.dim() > 1) g = adapted_gradient(p, g, o);
      s.momentum_buffer().mul_(o.momentum()).add_(g, o.lr());
      p.sub_(s.momentum_buffer());
    }
  }
  return loss;
}

void Lars::save(::torch::serialize::OutputArchive& archive) const { serialize(*this, archive); }
void Lars::load(::torch::serialize::InputArchive& archive) { serialize(*this, archive); }

}  // namespace lockstep::optim
