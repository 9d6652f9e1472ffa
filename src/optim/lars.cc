#include "lockstep/optim/lars.h"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "lockstep/base/error.h"

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

Lars::Lars(std::vector<::torch::optim::OptimizerParamGroup> groups, LarsOptions defaults)
    : Optimizer(std::move(groups), std::make_unique<LarsOptions>(defaults)) {
  // Groups may carry their own options; each must be valid, not just the defaults.
  defaults.validate();
  for (auto& group : param_groups_) static_cast<LarsOptions&>(group.options()).validate();
}

::torch::Tensor Lars::step(LossClosure closure) {
  ::torch::NoGradGuard no_grad;
  ::torch::Tensor loss;
  if (closure) {
    ::torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    auto& o = static_cast<LarsOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      ::torch::Tensor g = p.grad();
      bool adapt = !(o.exclude_1d() && p.dim() <= 1);
      double local = 1.0;
      if (adapt) {
        double wn = p.norm().item<double>(), gn = g.norm().item<double>();
        if (wn > 0 && gn > 0) local = o.trust_coefficient() * wn / (gn + o.weight_decay() * wn);
        if (o.weight_decay() != 0) g = g.add(p, o.weight_decay());
      }
      auto key = c10::guts::to_string(p.unsafeGetTensorImpl());
      auto& slot = state_[key];
      if (!slot) {
        auto s = std::make_unique<LarsParamState>();
        s->momentum_buffer(::torch::zeros_like(p));
        slot = std::move(s);
      }
      auto& v = static_cast<LarsParamState&>(*slot).momentum_buffer();
      v.mul_(o.momentum()).add_(g, o.lr() * local);
      p.sub_(v);
    }
  }
  return loss;
}

void Lars::save(::torch::serialize::OutputArchive& archive) const { serialize(*this, archive); }
void Lars::load(::torch::serialize::InputArchive& archive) { serialize(*this, archive); }

}  // namespace lockstep::optim
