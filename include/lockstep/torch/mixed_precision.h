// Mixed-precision training for lockstep workers: reduced-precision compute
// where the CPU has it, fp32 master weights, and dynamic loss scaling whose
// skip decision is taken by all ranks together.
//
//   lt::Precision precision = lt::parse_precision("bf16");
//   lt::GradScaler scaler({.enabled = precision == lt::Precision::kFp16});
//   for (...) {
//     opt.zero_grad();
//     ::torch::Tensor loss;
//     {
//       lt::AutocastGuard autocast(precision);          // forward in bf16
//       auto logits = model->forward(x);
//       loss = ::torch::cross_entropy(logits.to(::torch::kFloat32), y);
//     }
//     scaler.scale(loss).backward();                     // backward follows the casts
//     scaler.step(opt);                                  // opt: a DistributedOptimizer
//   }
//
// Master weights: the model's parameters stay fp32 and are what the
// optimizer updates (LARS/LAMB/Adam state too); autocast casts them to bf16
// per operation, so nothing has to be copied back.
//
// Precisions:
//  kFp32  nothing changes.
//  kBf16  CPU autocast to bfloat16 (LibTorch's AutocastCPU: convolutions,
//         linear layers and matmuls run in bf16; softmax, losses and
//         reductions stay fp32). Its 8-bit exponent covers fp32's range, so
//         no loss scaling is needed.
//  On a CUDA placement (placement().device == kCuda) the same guard turns
//  on CUDA autocast instead: bf16 or fp16 (LibTorch's AutocastCUDA).
//  kFp16  dynamic loss scaling (GradScaler) for IEEE half: on CUDA it
//         autocasts to fp16; on CPUs, LibTorch 1.13 has no fp16 kernels
//         (conv and matmul are not implemented for Half), so compute stays
//         fp32 and the precision that matters is the gradients' on the wire:
//         use DistributedOptimizer's Compression::kFp16 and the scale keeps
//         small gradients from flushing to zero there, while an overflow to
//         inf skips the step.
//
// Thread-safety: AutocastGuard changes thread-local state of the calling
// thread only; GradScaler is driven from the training thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace lockstep::torch {

class DistributedOptimizer;

enum class Precision { kFp32, kBf16, kFp16 };
// "fp32" | "bf16" | "fp16"; throws InvalidArgument naming the choices.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision precision);
// Whether this CPU computes bf16 natively (AVX512-BF16 or AMX); without it
// bf16 is emulated and slower than fp32, though numerically the same.
bool cpu_has_native_bf16();

// RAII: autocast on for this thread on the worker's device (bf16 on CPU;
// bf16 or fp16 on CUDA), restored on destruction. Nestable.
class AutocastGuard {
 public:
  // The device: placement()'s (the worker's GPU after init() placed it there).
  explicit AutocastGuard(Precision precision);
  AutocastGuard(Precision precision, ::torch::DeviceType device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool was_enabled_ = false;
  ::torch::DeviceType device_ = ::torch::kCPU;
  ::torch::ScalarType previous_dtype_ = ::torch::kBFloat16;
};

struct GradScalerOptions {
  bool enabled = true;  // false: scale() and step() are plain pass-throughs
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // finite steps in a row before growing
  double min_scale = 1.0;          // never back off below this
};

// Dynamic loss scaling with torch.cuda.amp.GradScaler's rules: multiply the
// loss by the scale; before the step, unscale the gradients; if any gradient
// on ANY rank is inf/NaN, skip the step on every rank and multiply the scale
// by backoff_factor; after growth_interval finite steps, multiply it by
// growth_factor. The "any rank" is an allreduce(max) of one flag per step
// (with a DistributedOptimizer; a plain optimizer in a multi-rank job too),
// so ranks never disagree on which steps ran, whatever their local gradients.
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (a no-op when disabled).
  ::torch::Tensor scale(const ::torch::Tensor& loss) const;
  // Synchronizes the gradients, unscales them, decides collectively and
  // steps or skips; then updates the scale. Returns whether it stepped.
  bool step(DistributedOptimizer& optimizer);
  // The same for a plain optimizer whose gradients are already what every
  // rank should use (or a single process).
  bool step(::torch::optim::Optimizer& optimizer);

  double get_scale() const { return scale_; }
  int64_t steps() const { return steps_; }
  int64_t skipped_steps() const { return skipped_; }
  bool enabled() const { return options_.enabled; }

  // For checkpoints: scale, growth tracker and counters.
  ::torch::Tensor state() const;
  void load_state(const ::torch::Tensor& state);

 private:
  // Divides every gradient by the scale; true when all are finite here.
  bool unscale_locally(::torch::optim::Optimizer& optimizer) const;
  bool all_ranks_finite(bool local_finite);
  bool finish(bool finite);

  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace lockstep::torch
