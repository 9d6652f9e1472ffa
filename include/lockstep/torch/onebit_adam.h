// DeepSpeed's 1-bit Adam (Tang et al., "1-bit Adam: Communication Efficient
// Large-Scale Training with Adam's Convergence Speed", ICML 2021; DeepSpeed's
// runtime/fp16/onebit/adam.py) over a torch::optim::Adam or AdamW:
//
//   warm-up (the first warmup_steps steps): plain distributed Adam. The
//     gradients are allreduced (averaged) as with no compression, and the
//     wrapped Adam steps, so these steps are bitwise those of
//     DistributedOptimizer over Adam without compression.
//   compression stage: Adam's variance v is frozen (its bias correction
//     with it, at warmup_steps); each rank folds its *local* gradient into
//     the momentum, m = b1 m + (1 - b1) g, and the momenta, not the
//     gradients, travel: one 1-bit compressed allreduce with worker and
//     server error feedback (CompressedAllreduce, compressed_allreduce.h) over every
//     parameter at once, whose result replaces m on every rank. Then
//     p -= lr clamp(m / (1 - b1^t) / (sqrt(v / (1 - b2^warmup)) + eps), ±B),
//     B = max(1, (1 - b1) / sqrt(1 - b2)): Adam's own largest step per lr
//     (Note [1-bit step bound] in onebit_optimizer.h).
//
// The frozen variance is what makes the compression safe: the update is a
// fixed preconditioner times the momentum, so the momentum's compression
// error is fed back like an SGD gradient's (the paper's argument). Weight
// decay follows the wrapped optimizer in both stages: over Adam it is added
// to the gradient (L2), so it travels in the compressed momentum; over AdamW
// it is decoupled, p *= 1 - lr wd before the update, applied locally and
// never compressed (DeepSpeed's OnebitAdam adds wd p to the update, the
// same). Bias correction follows torch's so the stages join without a jump.
//
// Elements whose frozen v is exactly 0 (no gradient in the whole warm-up:
// dead units, unused rows) keep m = 0: the compressed mean gives them ±scale
// (signs carry no zero), which divided by ε made lockstep-parallelism's
// loss overflow after its 4-step warm-up. DeepSpeed asks the user for this
// mask (exp_avg_mask); 1-bit LAMB (onebit_lamb.h) does the same. Elements
// whose v is tiny but not 0 are what the bound B is for.
//
// Whether a step compresses is read from the Adam state's step count, so a
// job resumed from a checkpoint past warm-up stays in the compression stage
// (the error feedback restarts from zero, as DeepSpeed's does on load).
//
// Used through DistributedOptimizer (Compression::kOneBitAdam,
// options.onebit_adam) over a torch::optim::Adam or AdamW. Every rank of the group
// must step together. Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "lockstep/torch/group.h"
#include "lockstep/torch/compressed_allreduce.h"
#include "lockstep/torch/onebit_optimizer.h"

namespace lockstep::torch {

struct OneBitAdamOptions {
  // Steps of plain distributed Adam before the variance freezes
  // (DeepSpeed's freeze_step); at least 1, so there is a variance to freeze.
  int64_t warmup_steps = 100;
};
// Throws InvalidArgument for warmup_steps < 1.
void validate(const OneBitAdamOptions& options);

class OneBitAdam : public OneBitOptimizer {
 public:
  // `adam` must outlive this object. Throws InvalidArgument when it uses
  // amsgrad (its running maximum of v has no frozen counterpart).
  OneBitAdam(::torch::optim::Adam& adam, OneBitAdamOptions options, Group group,
             std::string name_prefix);
  // The same over AdamW: its decoupled weight decay in both stages.
  OneBitAdam(::torch::optim::AdamW& adamw, OneBitAdamOptions options, Group group,
             std::string name_prefix);
  OneBitAdam(const OneBitAdam&) = delete;
  OneBitAdam& operator=(const OneBitAdam&) = delete;

  // Whether the next step is compressed: the optimizer's state has taken
  // warmup_steps steps. Before that, gradients must be averaged by the caller.
  bool compressing() const override;
  // Warm-up: the wrapped optimizer's step() (gradients already averaged).
  // Compression stage: the step above, from each parameter's local
  // gradient (a parameter without one contributes a zero gradient).
  // Collective over the group in the compression stage.
  void step() override;

 private:
  OneBitAdam(::torch::optim::Optimizer& optimizer, bool decoupled, OneBitAdamOptions options,
             Group group, std::string name_prefix);
  void compressed_step();

  ::torch::optim::Optimizer& optimizer_;  // an Adam, or an AdamW when decoupled_
  bool decoupled_;
  OneBitAdamOptions options_;
  int ranks_;
  CompressedAllreduce momentum_;
};

}  // namespace lockstep::torch
