// 1-bit (sign) gradient compression with error feedback, as DeepSpeed's
// compressed allreduce (Tang et al., "1-bit Adam", ICML 2021; Seide et al.
// 2014 for 1-bit SGD): every gradient of a step is flattened into one
// vector x of L values, and
//
//   x += worker_error                        this rank's error feedback
//   s  = |x|₂ / √L;  c = s · sign(x)        one bit per value + one scale
//   worker_error = x − c
//   alltoall: rank j receives chunk j (L/N values) of every rank's c
//   y  = mean over ranks of chunk j + server_error     (on rank j)
//   t  = |y|₂ / √(L/N);  d = t · sign(y);  server_error = y − d
//   allgather the d chunks: every rank holds the same compressed average
//
// So a step sends 2(N−1) · (L/(8N) + 4) bytes per rank, where an fp32
// allreduce sends 2(N−1)/N · 4L: about 32x less. The first warmup_steps
// steps allreduce whole gradients (DeepSpeed's warm-up stage). With Adam or
// LAMB wrapped, their second moment follows the compressed gradient: prefer
// SGD with momentum, or 1-bit Adam (onebit_adam.h), which freezes Adam's
// variance after its warm-up and compresses the momentum instead. The byte
// counts are lockstep/plan/compression.h's (shared with the planner).
//
// Used through DistributedOptimizer (Compression::kOneBit, options.onebit),
// which calls reduce() at synchronize(). Every rank of the group must call
// it with the same shapes in the same order. Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/torch/gradient_reducer.h"
#include "lockstep/torch/group.h"

namespace lockstep::torch {

struct OneBitOptions {
  int64_t warmup_steps = 0;  // steps of whole allreduce before compressing
};
// Throws InvalidArgument for warmup_steps < 0.
void validate(const OneBitOptions& options);

// Bytes one rank hands to the two collectives of a compressed step for L
// gradient values on `ranks` ranks (L padded to a multiple of 8 · ranks).
int64_t onebit_payload_bytes(int64_t values, int ranks);

// DeepSpeed's compressed allreduce of one flat vector (the scheme above,
// without the warm-up), with this rank's worker error and its chunk's
// server error kept between calls. OneBit applies it to gradients,
// OneBitAdam (onebit_adam.h) to Adam's momentum. Collective over `group`:
// every rank calls mean() with the same length, in the same order.
class CompressedAllreduce {
 public:
  // `name` names the two collectives (<name>.chunks, <name>.mean).
  CompressedAllreduce(Group group, std::string name);
  // The group's compressed mean of `values` (any shape; f32 result, flat).
  ::torch::Tensor mean(const ::torch::Tensor& values);

 private:
  ::torch::Tensor padded_mean(const ::torch::Tensor& x);

  Group group_;
  std::string name_;
  ::torch::Tensor worker_error_;  // padded length
  ::torch::Tensor server_error_;  // this rank's chunk
};

// An optimizer wrapper whose steps, after a warm-up of plain distributed
// steps, exchange the optimizer's momentum through a CompressedAllreduce
// instead of the gradients: OneBitAdam (onebit_adam.h) and OneBitLamb
// (onebit_lamb.h). DistributedOptimizer averages the gradients while
// !compressing() and leaves each rank's local gradient after; step() does
// the rest. Not thread-safe.
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

// Note [1-bit step bound]: Adam's per-element step lr·m̂/(√v̂ + ε) never
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

// Signs (>= 0 is +1) of `x` (length a multiple of 8) packed 8 to a byte,
// most significant bit first, and back to ±1 floats.
::torch::Tensor pack_signs(const ::torch::Tensor& x);
::torch::Tensor unpack_signs(const ::torch::Tensor& packed, ::torch::ScalarType dtype);

}  // namespace lockstep::torch
