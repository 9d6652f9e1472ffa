// OneBitOptimizer: an optimizer wrapper whose steps, after a warm-up of
// plain distributed steps, exchange the optimizer's momentum through a
// CompressedAllreduce (compressed_allreduce.h) instead of the gradients:
// OneBitAdam (onebit_adam.h) and OneBitLamb (onebit_lamb.h). Their
// DistributedOptimizer scheme ("onebit-adam", "onebit-lamb";
// gradient_scheme.h) averages the gradients while !compressing() and leaves
// each rank's local gradient after; step() does the rest. Also the step
// bound both apply. Not thread-safe.
#pragma once

#include <torch/torch.h>

namespace lockstep::torch {

class OneBitOptimizer {
 public:
  virtual ~OneBitOptimizer() = default;
  // Whether the next step() is compressed (the warm-up is over). Before
  // that, gradients must be averaged by the caller.
  virtual bool compressing() const = 0;
  // Warm-up: the wrapped optimizer's step (gradients already averaged).
  // After it: a step from each rank's local gradient, collective over the
  // group.
  virtual void step() = 0;
};

// Note [1-bit step bound]
// Adam's per-element step lr·m̂/(√v̂ + ε) never
// exceeds lr·max(1, (1 − β1)/√(1 − β2)) (Kingma & Ba 2015, section 2.1:
// "the effective step size ... is bounded"), because m and v follow the
// same gradients. In the compression stage they do not: m is the compressed
// mean, whose magnitude is the tensor's mean |m| (the scale), not the
// element's own, and v is frozen; where the frozen v is tiny but not 0 the
// quotient is many times Adam's largest step (lockstep-parallelism's loss
// went from 2.16 to 7447 to NaN after a 4-step warm-up). So the compressed
// stage of 1-bit Adam and 1-bit LAMB (before its trust ratio) clamps each
// element of m̂/(√v̂ + ε) to ±adam_step_bound(β1, β2): a step exact Adam
// could take, never a larger one.
double adam_step_bound(double beta1, double beta2);
// m / correction1 / denom (denom = √v̂ + ε), each element clamped to
// ±adam_step_bound(beta1, beta2): the update direction, in units of lr.
::torch::Tensor bounded_adam_direction(const ::torch::Tensor& m, double correction1,
                                       const ::torch::Tensor& denom, double beta1, double beta2);

}  // namespace lockstep::torch
