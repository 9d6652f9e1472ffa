// DistributedOptimizer's checks of the names it reduces gradients under.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace lockstep::torch::detail {

// Throws InvalidArgument naming the name and this rank when a name repeats
// (two gradients under one name would share a collective) or when a
// parameter of `optimizer` that requires grad has no name (its gradient
// would never be averaged), as Horovod's DistributedOptimizer refuses both.
void check_parameter_names(const ::torch::optim::Optimizer& optimizer,
                           const std::vector<std::pair<std::string, ::torch::Tensor>>& named);

}  // namespace lockstep::torch::detail
