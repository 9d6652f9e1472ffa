// Driving a torch::optim::Optimizer's learning rates from a Schedule.
//
// Stateless: the rates are recomputed from the iteration each call, so a
// resumed job needs only its step counter (see schedule.h). Groups keep
// their relative rates through explicit ratios, captured once with
// lr_ratios() before training; deriving them from the current rates instead
// would lose them the first time a schedule reaches 0 (warm-up from 0,
// decay to 0). Not thread-safe with a concurrent step() on the optimizer.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <vector>

#include "lockstep/optim/schedule.h"

namespace lockstep::optim {

// Sets every group's lr to schedule->lr_at(iteration).
void apply(const Schedule& schedule, ::torch::optim::Optimizer& optimizer, int64_t iteration);

// Sets group k's lr to schedule->lr_at(iteration) · ratios[k]. Throws
// lockstep::InvalidArgument when ratios.size() differs from the group count.
void apply(const Schedule& schedule, ::torch::optim::Optimizer& optimizer, int64_t iteration,
           const std::vector<double>& ratios);

// lr_k / lr_0 for every group k (so ratios[0] = 1). Throws
// lockstep::InvalidArgument when group 0's lr is 0 or there are no groups.
std::vector<double> lr_ratios(const ::torch::optim::Optimizer& optimizer);

}  // namespace lockstep::optim
