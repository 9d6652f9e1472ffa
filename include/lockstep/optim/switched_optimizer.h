// Optimizer switching ("ImageNet in 15 minutes": RMSProp for the first
// epochs, then SGD). Both optimizers hold the same parameters; the epoch
// picks which one steps, so a resumed or re-formed job that knows its epoch
// steps the same one. The second starts with its own (fresh or loaded) state
// at the switch, as in the recipe.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>

#include "lockstep/optim/schedule.h"

namespace lockstep::optim {

class SwitchedOptimizer {
 public:
  // Throws InvalidArgument when either optimizer is null or the switch epoch
  // is negative.
  SwitchedOptimizer(std::shared_ptr<::torch::optim::Optimizer> first,
                    std::shared_ptr<::torch::optim::Optimizer> second, OptimizerSwitch when);

  ::torch::optim::Optimizer& active(int64_t epoch) const;
  ::torch::Tensor step(int64_t epoch, ::torch::optim::Optimizer::LossClosure closure = nullptr);
  void zero_grad();
  ::torch::optim::Optimizer& first() const { return *first_; }
  ::torch::optim::Optimizer& second() const { return *second_; }

 private:
  std::shared_ptr<::torch::optim::Optimizer> first_, second_;
  OptimizerSwitch when_;
};

}  // namespace lockstep::optim
