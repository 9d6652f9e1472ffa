// Internal plumbing shared by the lockstep optimizers (not installed).
#pragma once

#include <torch/optim/optimizer.h>

#include "lockstep/optim/state_key.h"

#include <memory>
#include <utility>

namespace lockstep::optim::detail {

using optim::state_key;  // lockstep/optim/state_key.h

// The State of parameter p in `optimizer`, created by init(State&) on first
// use. Throws (std::bad_cast) if p's slot holds another optimizer's state.
template <class State, class Init>
State& param_state(::torch::optim::Optimizer& optimizer, const ::torch::Tensor& p, Init&& init) {
  auto& slot = optimizer.state()[state_key(p)];
  if (!slot) {
    auto fresh = std::make_unique<State>();
    std::forward<Init>(init)(*fresh);
    slot = std::move(fresh);
  }
  return dynamic_cast<State&>(*slot);
}

// Runs a step's closure, if any, with autograd on (step() itself runs
// under NoGradGuard); an undefined tensor without one.
inline ::torch::Tensor evaluate_closure(const ::torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  ::torch::AutoGradMode enable_grad(true);
  return closure();
}

// 1 where both norms are positive, else 0, as a tensor: trust ratios stay on
// the parameter's device, so a step costs no host synchronisation per tensor.
inline ::torch::Tensor both_positive(const ::torch::Tensor& a, const ::torch::Tensor& b) {
  return a.gt(0).logical_and(b.gt(0));
}

}  // namespace lockstep::optim::detail
