// Gradient noise for large-batch training, applied to the already averaged
// gradients of a list of parameters at iteration t.
//
// Every draw comes from a CPU generator seeded from (seed, t) alone
// (noise_generator), tensors taken in list order, so every rank that passes
// the same seed, t and parameter list adds bitwise identical noise: replicas
// stay in lock step without communicating. The noise is drawn on the CPU in
// each gradient's dtype and copied to its device. mt19937 takes a 32-bit
// seed, so two (seed, t) pairs share a stream with probability 2^-32.
// Parameters without a gradient are skipped (and draw nothing).
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace lockstep::optim {

// A CPU generator whose state depends only on (seed, iteration).
at::Generator noise_generator(uint64_t seed, int64_t iteration);

// Additive annealed Gaussian noise (Neelakantan et al., arXiv 1511.06807):
//   σ_t² = η / (1 + t)^γ,   g ← g + N(0, σ_t²) elementwise.
// The paper picks η from {0.01, 0.3, 1.0} per task and fixes γ = 0.55.
struct AnnealedNoiseOptions {
  double eta = 0.3;
  double gamma = 0.55;
  uint64_t seed = 0;
  void validate() const;  // throws lockstep::InvalidArgument
};

double annealed_noise_variance(const AnnealedNoiseOptions& options, int64_t iteration);
void add_annealed_gradient_noise(const std::vector<::torch::Tensor>& params, int64_t iteration,
                                 const AnnealedNoiseOptions& options);

// Multiplicative noise (Hoffer et al., arXiv 1705.08741, §5): the paper
// multiplies each sample's gradient by z_n ~ N(1, σ²) before averaging,
// which an all-reduced gradient no longer allows. This applies the
// documented approximation ĝ = g ⊙ z, z ~ N(1, σ²) i.i.d. per element.
struct MultiplicativeNoiseOptions {
  double variance = 0;  // σ²
  uint64_t seed = 0;
  void validate() const;  // throws lockstep::InvalidArgument
};

// σ² = scale · M with M = large_batch / small_batch, the batch ratio the
// paper ties the noise variance to (a large batch imitating a small one).
double batch_ratio_variance(int64_t large_batch, int64_t small_batch, double scale = 1.0);

void apply_multiplicative_gradient_noise(const std::vector<::torch::Tensor>& params,
                                         int64_t iteration,
                                         const MultiplicativeNoiseOptions& options);

}  // namespace lockstep::optim
