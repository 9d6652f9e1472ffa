#include "lockstep/torch/sampler.h"

#include <fmt/format.h>

#include <numeric>
#include <random>
#include <sstream>

#include "lockstep/base/error.h"

namespace lockstep::torch {
namespace {

// Fisher-Yates with our own bounded draw: identical on every standard library
// (std::shuffle's distribution is implementation-defined).
void shuffle(std::vector<int64_t>& v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = v.size(); i > 1; --i) {
    uint64_t bound = i;
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;  // reject the biased tail
    uint64_t draw = rng();
    while (draw >= limit) draw = rng();
    std::swap(v[i - 1], v[draw % bound]);
  }
}

uint64_t mix(uint64_t a, uint64_t b) {  // splitmix64 of the pair
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E5B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<int64_t> permutation(int64_t n, bool shuffled, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (shuffled) shuffle(order, seed);
  return order;
}

}  // namespace

DistributedSampler::DistributedSampler(DistributedSamplerOptions options)
    : options_(options) {
  if (options_.size < 1 || options_.rank < 0 || options_.rank >= options_.size)
    throw InvalidArgument(fmt::format("DistributedSampler: rank {} is not in [0, size={})",
                                      options_.rank, options_.size));
  if (options_.dataset_size <= 0)
    throw InvalidArgument(fmt::format("DistributedSampler: dataset_size {} must be positive",
                                      options_.dataset_size));
  const int64_t n = options_.dataset_size, s = options_.size;
  num_samples_ = options_.drop_last ? n / s : (n + s - 1) / s;
  if (num_samples_ == 0)
    throw InvalidArgument(fmt::format(
        "DistributedSampler: drop_last with {} samples over {} ranks leaves none per rank", n, s));
  build_epoch();
}

void DistributedSampler::set_epoch(int64_t epoch) {
  state_ = {epoch, 0};
  build_epoch();
}

int64_t DistributedSampler::num_batches(int64_t batch_size, bool drop_last_batch) const {
  if (batch_size <= 0) throw InvalidArgument("DistributedSampler: batch_size must be positive");
  return drop_last_batch ? num_samples_ / batch_size : (num_samples_ + batch_size - 1) / batch_size;
}

void DistributedSampler::build_epoch() {
  const int64_t n = options_.dataset_size;
  const uint64_t epoch_seed = mix(options_.seed, static_cast<uint64_t>(state_.epoch));
  indices_.clear();
  indices_.reserve(static_cast<size_t>(num_samples_));
  if (options_.scheme == SamplingScheme::kIndependent) {
    auto order = permutation(n, options_.shuffle,
                             mix(epoch_seed, static_cast<uint64_t>(options_.rank) + 1));
    for (int64_t i = 0; i < num_samples_; ++i) indices_.push_back(order[i % n]);
    return;
  }
  auto order = permutation(n, options_.shuffle, epoch_seed);
  // Padding wraps to the start of the shuffled order.
  for (int64_t i = 0; i < num_samples_; ++i) {
    int64_t position = options_.rank + i * options_.size;
    indices_.push_back(order[position % n]);
  }
}

std::vector<int64_t> DistributedSampler::next_batch(int64_t batch_size) {
  if (batch_size <= 0) throw InvalidArgument("DistributedSampler: batch_size must be positive");
  int64_t begin = std::min(state_.position, num_samples_);
  int64_t end = std::min(begin + batch_size, num_samples_);
  state_.position = end;
  return {indices_.begin() + begin, indices_.begin() + end};
}

void DistributedSampler::restore(const SamplerState& state) {
  if (state.position < 0 || state.position > num_samples_)
    throw InvalidArgument(fmt::format("DistributedSampler: position {} is outside [0, {}]",
                                      state.position, num_samples_));
  state_.epoch = state.epoch;
  build_epoch();
  state_.position = state.position;
}

std::string DistributedSampler::save() const {
  return fmt::format("{} {}", state_.epoch, state_.position);
}

void DistributedSampler::load(const std::string& text) {
  std::istringstream in(text);
  SamplerState s;
  if (!(in >> s.epoch >> s.position))
    throw InvalidArgument(fmt::format("DistributedSampler: bad saved state '{}'", text));
  restore(s);
}

}  // namespace lockstep::torch
