#include "lockstep/torch/onebit_adam.h"

#include <fmt/format.h>

#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/optim/state_key.h"

namespace lockstep::torch {

using ::torch::Tensor;
using ::torch::optim::AdamOptions;
using ::torch::optim::AdamParamState;
using ::torch::optim::AdamWOptions;
using ::torch::optim::AdamWParamState;
using ::torch::optim::Optimizer;

void validate(const OneBitAdamOptions& o) {
  if (o.warmup_steps < 1)
    throw InvalidArgument(fmt::format(
        "1-bit Adam: warmup_steps={} must be >= 1 (the variance it freezes comes from the "
        "warm-up's uncompressed steps)",
        o.warmup_steps));
}

namespace {

// Adam and AdamW keep the same state under different types: the code below
// is written once over the pair (AdamOptions, AdamParamState) or
// (AdamWOptions, AdamWParamState).
template <class Options>
constexpr bool kDecoupled = std::is_same_v<Options, AdamWOptions>;

// The state of p, or null before the optimizer's first step on it.
template <class State>
State* state_of(Optimizer& optimizer, const Tensor& p) {
  auto it = optimizer.state().find(optim::state_key(p));
  return it == optimizer.state().end() ? nullptr : static_cast<State*>(it->second.get());
}

template <class Options>
void refuse_amsgrad(Optimizer& optimizer) {
  for (const auto& g : optimizer.param_groups())
    if (static_cast<const Options&>(g.options()).amsgrad())
      throw InvalidArgument(fmt::format(
          "1-bit Adam: amsgrad is not supported (its running maximum of the variance has no "
          "frozen counterpart); use torch::optim::{} without amsgrad",
          kDecoupled<Options> ? "AdamW" : "Adam"));
}

template <class State>
bool past_warmup(Optimizer& optimizer, int64_t warmup_steps) {
  for (const auto& g : optimizer.param_groups())
    for (const auto& p : g.params())
      if (const State* s = state_of<State>(optimizer, p)) return s->step() >= warmup_steps;
  return false;  // no step taken yet
}

// One parameter of the compression stage, its state already advanced to
// this step: what the update needs, whichever optimizer holds it.
struct Item {
  Tensor param, exp_avg, exp_avg_sq;
  int64_t step;
  double lr, beta1, beta2, eps;
  double decoupled_decay;  // AdamW's weight decay; 0 over Adam (its L2 is in the gradient)
};

// Folds each local gradient (with Adam's L2 term) into the momentum and
// advances the step count; the momenta, flat, go to `momenta`.
template <class Options, class State>
std::vector<Item> fold_gradients(Optimizer& optimizer, std::vector<Tensor>& momenta) {
  std::vector<Item> items;
  for (auto& g : optimizer.param_groups()) {
    const auto& o = static_cast<const Options&>(g.options());
    const auto [beta1, beta2] = o.betas();
    for (auto& p : g.params()) {
      State* s = state_of<State>(optimizer, p);
      if (s == nullptr)
        throw InvalidArgument(
            "1-bit Adam: a parameter has no optimizer state after the warm-up (added to the "
            "optimizer late?); every parameter needs the warm-up's variance");
      Tensor grad = p.grad().defined() ? p.grad() : ::torch::zeros_like(p);
      if (!kDecoupled<Options> && o.weight_decay() != 0) grad = grad.add(p, o.weight_decay());
      s->exp_avg().mul_(beta1).add_(grad, 1 - beta1);
      s->exp_avg().masked_fill_(s->exp_avg_sq().eq(0), 0);  // see compressed_step
      s->step(s->step() + 1);
      momenta.push_back(s->exp_avg().reshape({-1}));
      items.push_back({p, s->exp_avg(), s->exp_avg_sq(), s->step(), o.lr(), beta1, beta2, o.eps(),
                       kDecoupled<Options> ? o.weight_decay() : 0.0});
    }
  }
  return items;
}

}  // namespace

OneBitAdam::OneBitAdam(::torch::optim::Adam& adam, OneBitAdamOptions options, Group group,
                       std::string name_prefix)
    : OneBitAdam(adam, false, options, std::move(group), std::move(name_prefix)) {}

OneBitAdam::OneBitAdam(::torch::optim::AdamW& adamw, OneBitAdamOptions options, Group group,
                       std::string name_prefix)
    : OneBitAdam(adamw, true, options, std::move(group), std::move(name_prefix)) {}

OneBitAdam::OneBitAdam(Optimizer& optimizer, bool decoupled, OneBitAdamOptions options, Group group,
                       std::string name_prefix)
    : optimizer_(optimizer),
      decoupled_(decoupled),
      options_(options),
      ranks_(group.size()),
      momentum_(std::move(group), name_prefix + ".onebit_adam") {
  validate(options_);
  if (decoupled_)
    refuse_amsgrad<AdamWOptions>(optimizer_);
  else
    refuse_amsgrad<AdamOptions>(optimizer_);
}

bool OneBitAdam::compressing() const {
  return decoupled_ ? past_warmup<AdamWParamState>(optimizer_, options_.warmup_steps)
                    : past_warmup<AdamParamState>(optimizer_, options_.warmup_steps);
}

void OneBitAdam::step() {
  if (ranks_ == 1 || !compressing()) {  // one rank: nothing to send, plain Adam(W)
    optimizer_.step();
    return;
  }
  ::torch::NoGradGuard no_grad;
  compressed_step();
}

// Momenta from local gradients, one compressed mean of all of them, then the
// update with the frozen variance (see the header).
void OneBitAdam::compressed_step() {
  std::vector<Tensor> momenta;
  std::vector<Item> items = decoupled_
                                ? fold_gradients<AdamWOptions, AdamWParamState>(optimizer_, momenta)
                                : fold_gradients<AdamOptions, AdamParamState>(optimizer_, momenta);
  if (items.empty()) return;
  const Tensor mean = momentum_.mean(::torch::cat(momenta));
  int64_t offset = 0;
  for (Item& it : items) {
    Tensor& m = it.exp_avg;
    m.copy_(mean.narrow(0, offset, m.numel()).view(m.sizes()));
    // Signs carry no zero: where the frozen v is 0 the compressed mean is
    // noise, and dividing by ε would make it the update (the header).
    m.masked_fill_(it.exp_avg_sq.eq(0), 0);
    offset += m.numel();
    const double correction1 = 1 - std::pow(it.beta1, static_cast<double>(it.step));
    const double correction2 = 1 - std::pow(it.beta2, static_cast<double>(options_.warmup_steps));
    const Tensor denom = (it.exp_avg_sq.sqrt() / std::sqrt(correction2)).add_(it.eps);
    // AdamW's decay, before the update as torch::optim::AdamW applies it.
    if (it.decoupled_decay != 0) it.param.mul_(1 - it.lr * it.decoupled_decay);
    // Never a larger step than Adam's own (Note [1-bit step bound]).
    it.param.add_(bounded_adam_direction(m, correction1, denom, it.beta1, it.beta2), -it.lr);
  }
  LOCKSTEP_DCHECK_EQ(offset, mean.numel(), "every momentum came back from the one allreduce");
}

}  // namespace lockstep::torch
