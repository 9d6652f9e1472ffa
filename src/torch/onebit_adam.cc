#include "lockstep/torch/onebit_adam.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/optim/state_key.h"

namespace lockstep::torch {

using ::torch::Tensor;
using ::torch::optim::AdamOptions;
using ::torch::optim::AdamParamState;

void validate(const OneBitAdamOptions& o) {
  if (o.warmup_steps < 1)
    throw InvalidArgument(fmt::format(
        "1-bit Adam: warmup_steps={} must be >= 1 (the variance it freezes comes from the "
        "warm-up's uncompressed steps)", o.warmup_steps));
}

OneBitAdam::OneBitAdam(::torch::optim::Adam& adam, OneBitAdamOptions options, Group group,
                       std::string name_prefix)
    : adam_(adam),
      options_(options),
      ranks_(group.size()),
      momentum_(std::move(group), name_prefix + ".onebit_adam") {
  validate(options_);
  for (const auto& g : adam_.param_groups())
    if (static_cast<const AdamOptions&>(g.options()).amsgrad())
      throw InvalidArgument(
          "1-bit Adam: amsgrad is not supported (its running maximum of the variance has no "
          "frozen counterpart); use torch::optim::Adam without amsgrad");
}

namespace {

// The Adam state of p, or null before Adam's first step on it.
AdamParamState* state_of(::torch::optim::Adam& adam, const Tensor& p) {
  auto it = adam.state().find(optim::state_key(p));
  return it == adam.state().end() ? nullptr : static_cast<AdamParamState*>(it->second.get());
}

}  // namespace

bool OneBitAdam::compressing() const {
  for (const auto& g : adam_.param_groups())
    for (const auto& p : g.params())
      if (const AdamParamState* s = state_of(adam_, p)) return s->step() >= options_.warmup_steps;
  return false;  // no step taken yet
}

void OneBitAdam::step() {
  if (ranks_ == 1 || !compressing()) {  // one rank: nothing to send, plain Adam
    adam_.step();
    return;
  }
  ::torch::NoGradGuard no_grad;
  compressed_step();
}

// Momenta from local gradients, one compressed mean of all of them, then the
// update with the frozen variance (see the header).
void OneBitAdam::compressed_step() {
  struct Item {
    Tensor param;
    AdamParamState* state;
    const AdamOptions* options;
  };
  std::vector<Item> items;
  std::vector<Tensor> momenta;
  for (auto& g : adam_.param_groups()) {
    const auto& o = static_cast<const AdamOptions&>(g.options());
    for (auto& p : g.params()) {
      AdamParamState* s = state_of(adam_, p);
      if (s == nullptr)
        throw InvalidArgument(
            "1-bit Adam: a parameter has no Adam state after the warm-up (added to the optimizer "
            "late?); every parameter needs the warm-up's variance");
      Tensor grad = p.grad().defined() ? p.grad() : ::torch::zeros_like(p);
      if (o.weight_decay() != 0) grad = grad.add(p, o.weight_decay());
      s->exp_avg().mul_(std::get<0>(o.betas())).add_(grad, 1 - std::get<0>(o.betas()));
      s->exp_avg().masked_fill_(s->exp_avg_sq().eq(0), 0);  // see below
      momenta.push_back(s->exp_avg().reshape({-1}));
      items.push_back({p, s, &o});
    }
  }
  if (items.empty()) return;
  const Tensor mean = momentum_.mean(::torch::cat(momenta));
  int64_t offset = 0;
  for (auto& [p, s, o] : items) {
    Tensor m = s->exp_avg();
    m.copy_(mean.narrow(0, offset, m.numel()).view(m.sizes()));
    // Signs carry no zero: where the frozen v is 0 the compressed mean is
    // noise, and dividing by ε would make it the update (the header).
    m.masked_fill_(s->exp_avg_sq().eq(0), 0);
    offset += m.numel();
    s->step(s->step() + 1);
    const auto [beta1, beta2] = o->betas();
    const double correction1 = 1 - std::pow(beta1, static_cast<double>(s->step()));
    const double correction2 = 1 - std::pow(beta2, static_cast<double>(options_.warmup_steps));
    const Tensor denom = (s->exp_avg_sq().sqrt() / std::sqrt(correction2)).add_(o->eps());
    // Never a larger step than Adam's own (Note [1-bit step bound]).
    p.add_(bounded_adam_direction(m, correction1, denom, beta1, beta2), -o->lr());
  }
}

}  // namespace lockstep::torch
