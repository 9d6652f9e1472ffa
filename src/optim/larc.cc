#include "lockstep/optim/larc.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <c10/util/Type.h>

#include <cmath>
#include <typeinfo>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/optim/lamb.h"
#include "lockstep/optim/lars.h"
#include "lockstep/optim/novograd.h"
#include "optim/mirrored_groups.h"
#include "optim/param_state.h"

namespace lockstep::optim {

namespace to = ::torch::optim;

void LarcOptions::validate() const {
  auto check = [](bool ok, const char* what, double v) {
    if (!ok) throw InvalidArgument(fmt::format("LARC: {} = {} is invalid", what, v));
  };
  check(std::isfinite(trust_coefficient) && trust_coefficient > 0, "trust_coefficient",
        trust_coefficient);
  check(std::isfinite(eps) && eps >= 0, "eps", eps);
  if (static_cast<bool>(weight_decay_of) != static_cast<bool>(set_weight_decay))
    throw InvalidArgument("LARC: give both weight_decay_of and set_weight_decay, or neither");
}

namespace {

// The option types whose weight_decay LARC reads and suspends.
template <class F>
bool with_decay_options(to::OptimizerOptions& options, F&& f) {
  auto visit = [&]<class O>() {
    auto* typed = dynamic_cast<O*>(&options);
    if (typed) f(*typed);
    return typed != nullptr;
  };
  return visit.template operator()<to::SGDOptions>() ||
         visit.template operator()<to::AdamOptions>() ||
         visit.template operator()<to::AdamWOptions>() ||
         visit.template operator()<to::RMSpropOptions>() ||
         visit.template operator()<to::AdagradOptions>() ||
         visit.template operator()<LarsOptions>() || visit.template operator()<LambOptions>() ||
         visit.template operator()<NovoGradOptions>();
}

std::shared_ptr<to::Optimizer> non_null(std::shared_ptr<to::Optimizer> inner) {
  if (!inner) throw InvalidArgument("LARC: the wrapped optimizer is null");
  return inner;
}

}  // namespace

std::optional<double> group_weight_decay(const to::OptimizerOptions& options) {
  std::optional<double> wd;
  // with_decay_options only reads here; the cast keeps one type list.
  with_decay_options(const_cast<to::OptimizerOptions&>(options),
                     [&](const auto& typed) { wd = typed.weight_decay(); });
  return wd;
}

Larc::Larc(std::shared_ptr<to::Optimizer> inner, LarcOptions options)
    : to::Optimizer(detail::clone_groups(*non_null(inner)), non_null(inner)->defaults().clone()),
      inner_(std::move(inner)),
      options_(std::move(options)) {
  options_.validate();
  for (size_t i = 0; i < param_groups().size(); ++i) weight_decay(param_groups()[i].options(), i);
}

double Larc::weight_decay(const to::OptimizerOptions& group, size_t index) const {
  if (options_.weight_decay_of) return options_.weight_decay_of(group);
  if (auto wd = group_weight_decay(group)) return *wd;
  throw InvalidArgument(fmt::format(
      "LARC: cannot read the weight decay of parameter group {} ({}); LARC knows SGD, Adam, "
      "AdamW, RMSprop, Adagrad, Lars, Lamb and NovoGrad: for another optimizer give "
      "LarcOptions::weight_decay_of and set_weight_decay",
      index, c10::demangle(typeid(group).name())));
}

void Larc::set_weight_decay(to::OptimizerOptions& group, double wd) const {
  if (options_.set_weight_decay) return options_.set_weight_decay(group, wd);
  with_decay_options(group, [&](auto& typed) { typed.weight_decay(wd); });
}

void Larc::adapt_gradients(double lr, double weight_decay,
                           const std::vector<::torch::Tensor>& params) const {
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    auto g = p.grad();
    auto pn = p.norm(), gn = g.norm();
    auto adaptive = options_.trust_coefficient * pn / (gn + weight_decay * pn + options_.eps);
    if (options_.clip) adaptive = (adaptive / lr).clamp_max(1.0);
    // Tensor-valued selection keeps the step free of host syncs; a skipped
    // tensor gets factor 1 and no decay, as in apex.
    auto apply = detail::both_positive(pn, gn);
    auto factor = ::torch::where(apply, adaptive, ::torch::ones_like(adaptive));
    if (weight_decay != 0) g.add_(p * apply.to(p.scalar_type()), weight_decay);
    g.mul_(factor);
  }
}

::torch::Tensor Larc::step(LossClosure closure) {
  ::torch::Tensor loss;
  {
    ::torch::NoGradGuard no_grad;
    loss = detail::evaluate_closure(closure);
  }
  auto& groups = param_groups();
  // Every decay is read before any gradient changes, so a refused group
  // leaves the gradients as they were.
  std::vector<double> decays;
  for (size_t i = 0; i < groups.size(); ++i) decays.push_back(weight_decay(groups[i].options(), i));
  detail::push_groups(*this, *inner_, "LARC");
  ::torch::NoGradGuard no_grad;
  for (size_t i = 0; i < groups.size(); ++i) {
    set_weight_decay(inner_->param_groups()[i].options(), 0.0);
    adapt_gradients(groups[i].options().get_lr(), decays[i], groups[i].params());
  }
  // The inner optimizer shows its real decay between steps, also when its
  // step throws.
  auto restore = [&] {
    for (size_t i = 0; i < groups.size(); ++i)
      set_weight_decay(inner_->param_groups()[i].options(), decays[i]);
  };
  // The closure already ran: the inner step must not recompute gradients
  // over the adapted ones.
  try {
    inner_->step();
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return loss;
}

void Larc::save(::torch::serialize::OutputArchive& archive) const {
  // The inner optimizer serializes its own groups: give it the Larc's
  // (with their real decays) first.
  detail::push_groups(*this, *inner_, "LARC");
  inner_->save(archive);
}

void Larc::load(::torch::serialize::InputArchive& archive) {
  detail::push_groups(*this, *inner_, "LARC");
  inner_->state().clear();  // load() merges: state the archive lacks would stay
  inner_->load(archive);
  detail::pull_options(*this, *inner_);
}

}  // namespace lockstep::optim
