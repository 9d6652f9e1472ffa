#include "lockstep/torch/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

#include "lockstep/base/error.h"
#include "lockstep/torch/profile.h"

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

// Every epoch must give each rank at least one index, or a fresh epoch would
// leave some rank with no batches at all.
void check_world(const DistributedSamplerOptions& o, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw InvalidArgument(
        fmt::format("DistributedSampler: rank {} is not in [0, size={})", rank, size));
  if (o.dataset_size <= 0)
    throw InvalidArgument(
        fmt::format("DistributedSampler: dataset_size {} must be positive", o.dataset_size));
  if (o.drop_last && o.dataset_size < size)
    throw InvalidArgument(fmt::format(
        "DistributedSampler: drop_last with {} samples over {} ranks leaves none per rank",
        o.dataset_size, size));
}

}  // namespace

DistributedSampler::DistributedSampler(DistributedSamplerOptions options) : options_(options) {
  check_world(options_, options_.rank, options_.size);
  build_epoch();
}

void DistributedSampler::set_epoch(int64_t epoch) {
  state_ = {epoch, 0, 0};
  build_epoch();
}

int64_t DistributedSampler::share_of(int64_t remaining) const {
  const int64_t s = options_.size;
  return options_.drop_last ? remaining / s : (remaining + s - 1) / s;
}

int64_t DistributedSampler::num_batches(int64_t batch_size, bool drop_last_batch) const {
  if (batch_size <= 0) throw InvalidArgument("DistributedSampler: batch_size must be positive");
  return drop_last_batch ? num_samples_ / batch_size : (num_samples_ + batch_size - 1) / batch_size;
}

void DistributedSampler::build_epoch() {
  const int64_t n = options_.dataset_size;
  const uint64_t epoch_seed = mix(options_.seed, static_cast<uint64_t>(state_.epoch));
  num_samples_ = share_of(n - state_.offset);
  indices_.clear();
  indices_.reserve(static_cast<size_t>(num_samples_));
  if (options_.scheme == SamplingScheme::kIndependent) {
    auto order =
        permutation(n, options_.shuffle, mix(epoch_seed, static_cast<uint64_t>(options_.rank) + 1));
    for (int64_t i = 0; i < num_samples_; ++i) indices_.push_back(order[i % n]);
    return;
  }
  auto order = permutation(n, options_.shuffle, epoch_seed);
  // Padding wraps to the start of the shuffled order (already-seen samples).
  for (int64_t i = 0; i < num_samples_; ++i) {
    int64_t position = state_.offset + options_.rank + i * options_.size;
    indices_.push_back(order[position % n]);
  }
}

std::vector<int64_t> DistributedSampler::next_batch(int64_t batch_size) {
  if (batch_size <= 0) throw InvalidArgument("DistributedSampler: batch_size must be positive");
  int64_t begin = std::min(state_.position, num_samples_);
  int64_t end = std::min(begin + batch_size, num_samples_);
  state_.position = end;
  profile_samples(end - begin);  // LOCKSTEP_PROFILE's samples per step
  return {indices_.begin() + begin, indices_.begin() + end};
}

void DistributedSampler::restore(const SamplerState& state) {
  const int64_t n = options_.dataset_size;
  const bool partition = options_.scheme == SamplingScheme::kPartition;
  if (state.offset < 0 || state.offset > n || (!partition && state.offset != 0))
    throw InvalidArgument(fmt::format(
        "DistributedSampler: offset {} is outside [0, {}] (and must be 0 for kIndependent)",
        state.offset, partition ? n : 0));
  const int64_t available = share_of(n - state.offset);
  if (state.position < 0 || state.position > available)
    throw InvalidArgument(fmt::format("DistributedSampler: position {} is outside [0, {}]",
                                      state.position, available));
  state_ = state;
  build_epoch();
}

// Note [Sampler state text]
// "epoch position offset size global_position dataset_size": the last three
// let load() in a world of another size continue the same global order
// (resume()) instead of restoring a position that means other samples
// there. Older texts ("epoch position [offset]") carry no size: they restore
// as they are, which is right only at the size that wrote them.
std::string DistributedSampler::save() const {
  return fmt::format("{} {} {} {} {} {}", state_.epoch, state_.position, state_.offset,
                     options_.size, global_position(), options_.dataset_size);
}

void DistributedSampler::load(const std::string& text) {
  std::istringstream in(text);
  SamplerState s;
  if (!(in >> s.epoch >> s.position))
    throw InvalidArgument(
        fmt::format("DistributedSampler: bad saved state '{}' (expected what save() writes: 'epoch "
                    "position offset size global_position dataset_size')",
                    text));
  // Checkpoints written before offset existed have two fields: offset 0.
  if (!(in >> s.offset)) s.offset = 0;
  int64_t size = 0, global = 0, dataset = 0;
  if (!(in >> size >> global >> dataset)) {
    restore(s);
    return;
  }
  if (dataset != options_.dataset_size)
    throw InvalidArgument(fmt::format(
        "DistributedSampler: the saved state is of a dataset of {} samples, this sampler's has "
        "{}; resume with the data set the run was saved with",
        dataset, options_.dataset_size));
  if (size == options_.size) {
    restore(s);
    return;
  }
  resume(s.epoch, global, options_.rank, options_.size);
}

int64_t DistributedSampler::global_position() const {
  const int64_t consumed = state_.offset + state_.position * options_.size;
  return std::min(consumed, options_.dataset_size);  // padding is not progress
}

void DistributedSampler::resume(int64_t epoch, int64_t global_position, int rank, int size) {
  if (epoch < 0)
    throw InvalidArgument(fmt::format("DistributedSampler::resume: epoch {} is negative", epoch));
  if (global_position < 0 || global_position > options_.dataset_size)
    throw InvalidArgument(fmt::format(
        "DistributedSampler::resume: global_position {} is outside [0, dataset_size={}]",
        global_position, options_.dataset_size));
  check_world(options_, rank, size);
  options_.rank = rank;
  options_.size = size;
  if (options_.scheme == SamplingScheme::kPartition) {
    state_ = {epoch, 0, global_position};
    build_epoch();
    return;
  }
  // kIndependent: no shared order to skip into; keep the share already done.
  state_ = {epoch, 0, 0};
  build_epoch();
  state_.position = std::min(num_samples_, (global_position + size - 1) / size);
}

}  // namespace lockstep::torch
