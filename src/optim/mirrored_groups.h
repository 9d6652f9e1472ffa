// Internal plumbing for optimizer wrappers that are torch::optim::Optimizers
// themselves (Larc, SwitchedOptimizer): the wrapper's param_groups() are the
// ones users, schedules, DistributedOptimizer and ElasticState see, and the
// wrapped optimizer's groups are refreshed from them before it steps.
// torch::optim::Optimizer::param_groups() is not virtual, so the two cannot
// share one vector; copying params and options each step is a few handle
// copies per group.
#pragma once

#include <torch/optim/optimizer.h>

#include <string_view>
#include <vector>

namespace lockstep::optim::detail {

// Copies of `optimizer`'s groups (same parameters, cloned options).
std::vector<::torch::optim::OptimizerParamGroup> clone_groups(
    const ::torch::optim::Optimizer& optimizer);

// Gives `inner` the wrapper's parameters and a clone of its options, group by
// group, adding groups the wrapper gained since. Throws InvalidArgument
// (naming `who`) when `inner` has more groups than the wrapper: groups must
// be added to the wrapper, which is what everything else sees.
void push_groups(const ::torch::optim::Optimizer& wrapper, ::torch::optim::Optimizer& inner,
                 std::string_view who);

// The wrapper's options become clones of `inner`'s (after loading state
// into inner, or when another inner optimizer becomes the active one).
void pull_options(::torch::optim::Optimizer& wrapper, const ::torch::optim::Optimizer& inner);

}  // namespace lockstep::optim::detail
