#include "lockstep/optim/gradient_noise.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::optim {

namespace {

// SplitMix64's finaliser: nearby (seed, t) pairs land far apart.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Standard normal noise shaped like g, from `gen`, on g's device.
::torch::Tensor standard_normal_like(const ::torch::Tensor& g, at::Generator& gen) {
  auto noise = ::torch::randn(g.sizes(), gen, ::torch::dtype(g.scalar_type()));
  return g.is_cpu() ? noise : noise.to(g.device());
}

template <class F>
void for_each_gradient(const std::vector<::torch::Tensor>& params, F&& f) {
  ::torch::NoGradGuard no_grad;
  for (const auto& p : params)
    if (p.grad().defined()) f(p.mutable_grad());
}

}  // namespace

at::Generator noise_generator(uint64_t seed, int64_t iteration) {
  const uint64_t key = mix(mix(seed) ^ static_cast<uint64_t>(iteration));
  // mt19937 keeps 32 bits of the seed; fold the high half in.
  return at::detail::createCPUGenerator((key ^ (key >> 32)) & 0xffffffffULL);
}

void AnnealedNoiseOptions::validate() const {
  if (!(eta >= 0 && std::isfinite(eta)) || !(gamma >= 0 && std::isfinite(gamma)))
    throw InvalidArgument(
        fmt::format("gradient noise: eta = {} and gamma = {} must be finite and >= 0", eta, gamma));
}

double annealed_noise_variance(const AnnealedNoiseOptions& options, int64_t iteration) {
  options.validate();
  if (iteration < 0)
    throw InvalidArgument(fmt::format("gradient noise: iteration = {} is negative", iteration));
  return options.eta / std::pow(1.0 + static_cast<double>(iteration), options.gamma);
}

void add_annealed_gradient_noise(const std::vector<::torch::Tensor>& params, int64_t iteration,
                                 const AnnealedNoiseOptions& options) {
  const double sigma = std::sqrt(annealed_noise_variance(options, iteration));
  auto gen = noise_generator(options.seed, iteration);
  for_each_gradient(params,
                    [&](::torch::Tensor& g) { g.add_(standard_normal_like(g, gen), sigma); });
}

void MultiplicativeNoiseOptions::validate() const {
  if (!(variance >= 0 && std::isfinite(variance)))
    throw InvalidArgument(
        fmt::format("gradient noise: variance = {} must be finite and >= 0", variance));
}

double batch_ratio_variance(int64_t large_batch, int64_t small_batch, double scale) {
  if (large_batch <= 0 || small_batch <= 0 || !(scale >= 0))
    throw InvalidArgument(
        fmt::format("gradient noise: batches {} / {} must be positive and "
                    "scale = {} >= 0",
                    large_batch, small_batch, scale));
  return scale * static_cast<double>(large_batch) / static_cast<double>(small_batch);
}

void apply_multiplicative_gradient_noise(const std::vector<::torch::Tensor>& params,
                                         int64_t iteration,
                                         const MultiplicativeNoiseOptions& options) {
  options.validate();
  const double sigma = std::sqrt(options.variance);
  auto gen = noise_generator(options.seed, iteration);
  for_each_gradient(params, [&](::torch::Tensor& g) {
    g.mul_(standard_normal_like(g, gen).mul_(sigma).add_(1.0));
  });
}

}  // namespace lockstep::optim
