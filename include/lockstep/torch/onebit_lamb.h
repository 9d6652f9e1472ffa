// DeepSpeed's 1-bit LAMB (Li et al., "1-bit LAMB: Communication Efficient
// Large-Scale Large-Batch Training with LAMB's Convergence Speed", arXiv
// 2104.06069; DeepSpeed's runtime/fp16/onebit/lamb.py) over a
// lockstep::optim::Lamb (lockstep/optim/lamb.h):
//
//   warm-up (the first warmup_steps steps): plain distributed LAMB. The
//     gradients are allreduced (averaged) as with no compression and the
//     wrapped Lamb steps, so these steps are bitwise those of
//     DistributedOptimizer over Lamb without compression. Each tensor's
//     trust ratio c (Lamb's, capped as its options say) is averaged:
//     c̄ = β c̄ + (1 − β) c (coeff_beta; bias-corrected, and ratios of
//     exactly 1, a zero norm, left out as DeepSpeed does).
//   compression stage: v frozen (its bias correction with it, at
//     warmup_steps) and c̄ frozen. Each rank folds its *local* gradient into
//     the momentum, m = β1 m + (1 − β1) g; the momenta of all tensors, each
//     scaled by s_i (fixed at the freeze so that every tensor's momentum
//     has the same rms: one scale per chunk would drown the small ones),
//     travel through one 1-bit compressed allreduce with worker and server
//     error feedback (CompressedAllreduce, compressed_allreduce.h); the mean, unscaled,
//     replaces m on every rank. Then, per tensor x:
//       g̃ = (m − β1 m_prev) / (1 − β1)         the gradient the new m implies
//       v_fresh = β2 v_fresh + (1 − β2) g̃²      (v_fresh = v at the freeze)
//       d = √(v / (1 − β2^warmup)) + ε,  d_fresh = √(v_fresh / (1 − β2^t)) + ε
//       u = clamp(m / (1 − β1^t) / d, ±B) + λ x   (B: 1-bit Adam's bound,
//           Note [1-bit step bound] in onebit_optimizer.h: the frozen c̄ does not see
//           this step's ‖u‖, so it cannot bound it as LAMB's own ratio does)
//       r = max over the elements of d / d_fresh, moved towards 1 by the
//           decay's share of u (r·a + 1 − a, a = min(1, ‖u − λx‖/‖u‖)),
//           clipped to [factor_min, factor_max] and to within
//           factor_threshold of the previous step's r (1 at the freeze)
//       x ← x − lr · c̄ r · u                    (c̄ r capped at max_trust_ratio)
//
// So the trust ratio stays LAMB's: c̄ is what exact LAMB applied at the end
// of the warm-up, and r follows how far the frozen variance has drifted
// from one the compressed momenta still update (the paper's Algorithm 1).
// Without bias_correction every 1 − β^k above is 1, as DeepSpeed's step.
//
// Elements whose frozen v is exactly 0 (no gradient in the whole warm-up:
// dead units, unused rows) keep m = 0 in the compression stage: signs
// cannot carry a zero, and 1/ε would turn the compression's ±scale there
// into the largest part of u. DeepSpeed asks the user for this mask
// (exp_avg_mask); here it is read from v at the freeze.
//
// Whether a step compresses is read from the Lamb state's step count, so a
// job resumed past the warm-up stays in the compression stage. c̄, v_fresh,
// r and the error feedback are not saved: a resumed job restarts the error
// feedback from zero (as DeepSpeed does), v_fresh from v and r from 1, and
// takes c̄ as the trust ratio exact LAMB would apply at its first step.
//
// Used through DistributedOptimizer (Compression::kOneBitLamb,
// options.onebit_lamb) over a lockstep::optim::Lamb. Every rank of the
// group must step together. Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/optim/lamb.h"
#include "lockstep/torch/group.h"
#include "lockstep/torch/compressed_allreduce.h"
#include "lockstep/torch/onebit_optimizer.h"

namespace lockstep::torch {

struct OneBitLambOptions {
  // Steps of plain distributed LAMB before v and c̄ freeze (DeepSpeed's
  // freeze_step); at least 1, so there is a variance to freeze.
  int64_t warmup_steps = 100;
  // Averaging of the warm-up's trust ratios, in [0, 1); 1/(1 − coeff_beta)
  // steps should fit in the warm-up (DeepSpeed's advice).
  double coeff_beta = 0.9;
  // Bounds of the factor r on c̄: 0 < factor_min <= 1 <= factor_max.
  double factor_min = 0.5;
  double factor_max = 4.0;
  // How far r may move in one step, relative to the last one: >= 0.
  double factor_threshold = 0.1;
};
// Throws InvalidArgument naming the first bad option.
void validate(const OneBitLambOptions& options);

class OneBitLamb : public OneBitOptimizer {
 public:
  // `lamb` must outlive this object and keep its parameter groups.
  OneBitLamb(optim::Lamb& lamb, OneBitLambOptions options, Group group, std::string name_prefix);
  OneBitLamb(const OneBitLamb&) = delete;
  OneBitLamb& operator=(const OneBitLamb&) = delete;
  ~OneBitLamb() override;

  // Whether the next step is compressed: the Lamb state has taken
  // warmup_steps steps. Before that, gradients must be averaged by the caller.
  bool compressing() const override;
  // Warm-up: the wrapped Lamb's step() (gradients already averaged), then
  // its trust ratios averaged. Compression stage: the step above, from each
  // parameter's local gradient (a parameter without one contributes a zero
  // gradient). Collective over the group in the compression stage.
  void step() override;

  // Per parameter, in the order of Lamb's groups: the trust ratio the last
  // step applied (Lamb's in the warm-up, c̄ r after it; 0 before any step),
  // and c̄ (0 before the compression stage). For tests and logs.
  std::vector<double> trust_ratios() const;
  std::vector<double> frozen_trust_ratios() const;

 private:
  struct Layer;
  void warmup_step();
  void freeze();
  void compressed_step();
  void update(Layer& layer, optim::LambParamState& state, const ::torch::Tensor& previous_m);
  const optim::LambOptions& options_of(const Layer& layer) const;

  optim::Lamb& lamb_;
  OneBitLambOptions options_;
  int ranks_;
  std::vector<Layer> layers_;
  bool frozen_ = false;
  CompressedAllreduce momentum_;
};

}  // namespace lockstep::torch
