// GradientReducer: a compression scheme that takes over a step's whole
// gradient reduction instead of allreducing each gradient (PowerSGD in
// powersgd.h, 1-bit in onebit.h). DistributedOptimizer's "powersgd" and
// "onebit" schemes (gradient_scheme.h) each own one and call reduce() at
// synchronize(), with every gradient of the step (zeros for parameters that
// got none).
//
// Implementations keep state across steps (error feedback), so one object
// serves one sequence of steps of one model. Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace lockstep::torch {

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // Replaces each of `grads` (in place) by the group's mean (sum when
  // !average), approximated as the scheme does. `names` identify the
  // gradients (the same on every rank). Collective over the group.
  virtual void reduce(const std::vector<::torch::Tensor>& grads,
                      const std::vector<std::string>& names, bool average) = 0;
};

}  // namespace lockstep::torch
