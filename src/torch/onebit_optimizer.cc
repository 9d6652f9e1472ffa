#include "lockstep/torch/onebit_optimizer.h"

#include <algorithm>
#include <cmath>

namespace lockstep::torch {

using ::torch::Tensor;

// Note [1-bit step bound] (onebit_optimizer.h).
double adam_step_bound(double beta1, double beta2) {
  return std::max(1.0, (1 - beta1) / std::sqrt(1 - beta2));
}

Tensor bounded_adam_direction(const Tensor& m, double correction1, const Tensor& denom,
                              double beta1, double beta2) {
  const double bound = adam_step_bound(beta1, beta2);
  return (m / correction1).div_(denom).clamp_(-bound, bound);
}

}  // namespace lockstep::torch
