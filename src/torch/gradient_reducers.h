// DistributedOptimizer's side of the compression schemes that replace the
// allreduce (GradientReducer: PowerSGD, 1-bit), kept out of
// distributed_optimizer.cc so that file only asks "does one take over?"
// and "make it".
#pragma once

#include <memory>

#include "lockstep/torch/distributed_optimizer.h"
#include "lockstep/torch/gradient_reducer.h"

namespace lockstep::torch::detail {

// kPowerSGD and kOneBit: the whole step's gradients go to a GradientReducer
// at synchronize() instead of one allreduce each.
bool replaces_allreduce(Compression compression);
// kOneBitAdam and kOneBitLamb: gradients allreduced in the warm-up, momenta
// compressed by the optimizer's step after it (OneBitOptimizer).
bool compresses_momentum(Compression compression);
// The reducer for options.compression over options.group, named under
// options.name_prefix. Requires replaces_allreduce(options.compression).
std::unique_ptr<GradientReducer> make_gradient_reducer(const DistributedOptimizerOptions& options);

}  // namespace lockstep::torch::detail
