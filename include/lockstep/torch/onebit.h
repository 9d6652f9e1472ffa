// 1-bit (sign) gradient compression with error feedback (Seide et al. 2014;
// DeepSpeed's compressed allreduce, Tang et al. ICML 2021): every gradient of
// a step is flattened into one vector and averaged through a
// CompressedAllreduce (compressed_allreduce.h: signs and a scale per chunk,
// worker and server error feedback, about 32x fewer bytes than fp32). The
// first warmup_steps steps allreduce whole gradients (DeepSpeed's warm-up
// stage). With Adam or LAMB wrapped, their second moment follows the
// compressed gradient: prefer SGD with momentum, or 1-bit Adam
// (onebit_adam.h), which freezes Adam's variance after its warm-up and
// compresses the momentum instead.
//
// Used through DistributedOptimizer (Compression::kOneBit, options.onebit:
// the "onebit" scheme, gradient_scheme.h), which calls reduce() at
// synchronize(). Every rank of the group must call it with the same shapes
// in the same order. Not thread-safe.
//
// Also includes, for programs written before the split, the compressed
// allreduce and sign packing (compressed_allreduce.h) and OneBitOptimizer
// with the step bound (onebit_optimizer.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/torch/compressed_allreduce.h"
#include "lockstep/torch/gradient_reducer.h"
#include "lockstep/torch/group.h"
#include "lockstep/torch/onebit_optimizer.h"

namespace lockstep::torch {

struct OneBitOptions {
  int64_t warmup_steps = 0;  // steps of whole allreduce before compressing
};
// Throws InvalidArgument for warmup_steps < 0.
void validate(const OneBitOptions& options);

class OneBit : public GradientReducer {
 public:
  OneBit(OneBitOptions options, Group group, std::string name_prefix);

  // Replaces each of `grads` (in place) by the group's mean (sum when
  // !average) as compressed above. Collective over the group.
  void reduce(const std::vector<::torch::Tensor>& grads, const std::vector<std::string>& names,
              bool average) override;
  int64_t steps() const { return steps_; }

 private:
  void allreduce_whole(const std::vector<::torch::Tensor>& grads,
                       const std::vector<std::string>& names, bool average);

  OneBitOptions options_;
  Group group_;
  std::string prefix_;
  int64_t steps_ = 0;
  CompressedAllreduce compressed_;
};

}  // namespace lockstep::torch
