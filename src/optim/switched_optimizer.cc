#include "lockstep/optim/switched_optimizer.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::optim {

SwitchedOptimizer::SwitchedOptimizer(std::shared_ptr<::torch::optim::Optimizer> first,
                                     std::shared_ptr<::torch::optim::Optimizer> second,
                                     OptimizerSwitch when)
    : first_(std::move(first)), second_(std::move(second)), when_(when) {
  if (!first_ || !second_)
    throw InvalidArgument("SwitchedOptimizer: both optimizers must be given (got a null one)");
  if (when_.switch_epoch < 0)
    throw InvalidArgument(
        fmt::format("SwitchedOptimizer: switch_epoch must be >= 0, got {}", when_.switch_epoch));
}

::torch::optim::Optimizer& SwitchedOptimizer::active(int64_t epoch) const {
  return when_.second_active(epoch) ? *second_ : *first_;
}

::torch::Tensor SwitchedOptimizer::step(int64_t epoch,
                                        ::torch::optim::Optimizer::LossClosure closure) {
  return active(epoch).step(std::move(closure));
}

// Both share the parameters, so either clears every gradient.
void SwitchedOptimizer::zero_grad() { first_->zero_grad(); }

}  // namespace lockstep::optim
