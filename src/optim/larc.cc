#include "lockstep/optim/larc.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/optim/lamb.h"
#include "lockstep/optim/lars.h"
#include "lockstep/optim/novograd.h"
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

void set_group_weight_decay(to::OptimizerOptions& options, double wd) {
  with_decay_options(options, [&](auto& typed) { typed.weight_decay(wd); });
}

// Puts every group's weight decay back when the inner step ends, even by
// an exception, so a failed step does not silently drop the decay.
class DecayRestorer {
 public:
  explicit DecayRestorer(to::Optimizer& optimizer) : optimizer_(optimizer) {}
  DecayRestorer(const DecayRestorer&) = delete;
  DecayRestorer& operator=(const DecayRestorer&) = delete;
  ~DecayRestorer() {
    auto& groups = optimizer_.param_groups();
    for (size_t i = 0; i < saved_.size(); ++i) set_group_weight_decay(groups[i].options(), saved_[i]);
  }
  // Returns the group's decay and sets it to 0 until destruction.
  double suspend(to::OptimizerOptions& options) {
    double wd = group_weight_decay(options).value_or(0.0);
    saved_.push_back(wd);
    set_group_weight_decay(options, 0.0);
    return wd;
  }

 private:
  to::Optimizer& optimizer_;
  std::vector<double> saved_;
};

}  // namespace

std::optional<double> group_weight_decay(const to::OptimizerOptions& options) {
  std::optional<double> wd;
  // with_decay_options only reads here; the cast keeps one type list.
  with_decay_options(const_cast<to::OptimizerOptions&>(options),
                     [&](const auto& typed) { wd = typed.weight_decay(); });
  return wd;
}

Larc::Larc(std::shared_ptr<to::Optimizer> inner, LarcOptions options)
    : inner_(std::move(inner)), options_(options) {
  if (!inner_) throw InvalidArgument("LARC: the wrapped optimizer is null");
  options_.validate();
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
  DecayRestorer restore(*inner_);
  for (auto& group : inner_->param_groups()) {
    double wd = restore.suspend(group.options());
    ::torch::NoGradGuard no_grad;
    adapt_gradients(group.options().get_lr(), wd, group.params());
  }
  // The closure already ran: the inner step must not recompute gradients
  // over the adapted ones.
  inner_->step();
  return loss;
}

::torch::serialize::OutputArchive& operator<<(::torch::serialize::OutputArchive& archive,
                                              const Larc& larc) {
  larc.save(archive);
  return archive;
}

::torch::serialize::InputArchive& operator>>(::torch::serialize::InputArchive& archive,
                                             Larc& larc) {
  larc.load(archive);
  return archive;
}

}  // namespace lockstep::optim
