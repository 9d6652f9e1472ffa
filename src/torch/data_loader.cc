#include "lockstep/torch/data_loader.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::torch {
namespace {

DistributedSamplerOptions options_for(size_t size, size_t replicas, size_t rank,
                                      bool allow_duplicates, uint64_t seed) {
  if (replicas == 0 || rank >= replicas)
    throw InvalidArgument(fmt::format(
        "DistributedDataSampler: rank {} is not in [0, num_replicas {})", rank, replicas));
  return {.dataset_size = static_cast<int64_t>(size),
          .rank = static_cast<int>(rank),
          .size = static_cast<int>(replicas),
          .seed = seed,
          .drop_last = !allow_duplicates};
}

}  // namespace

DistributedDataSampler::DistributedDataSampler(size_t size, size_t num_replicas, size_t rank,
                                               bool allow_duplicates, uint64_t seed)
    : ::torch::data::samplers::DistributedSampler<>(size, num_replicas, rank, allow_duplicates),
      options_(options_for(size, num_replicas, rank, allow_duplicates, seed)),
      sampler_(options_) {}

void DistributedDataSampler::reset(c10::optional<size_t> new_size) {
  if (new_size && static_cast<int64_t>(*new_size) != options_.dataset_size) {
    size_ = *new_size;
    options_.dataset_size = static_cast<int64_t>(*new_size);
    sampler_ = lockstep::torch::DistributedSampler(options_);
  }
  if (started_epoch_ && *started_epoch_ == epoch_) ++epoch_;  // nobody called set_epoch()
  sampler_.set_epoch(static_cast<int64_t>(epoch_));
  started_epoch_ = epoch_;
}

c10::optional<std::vector<size_t>> DistributedDataSampler::next(size_t batch_size) {
  if (!started_epoch_) reset();  // used without a DataLoader
  std::vector<int64_t> batch = sampler_.next_batch(static_cast<int64_t>(batch_size));
  if (batch.empty()) return c10::nullopt;
  return std::vector<size_t>(batch.begin(), batch.end());
}

void DistributedDataSampler::save(::torch::serialize::OutputArchive& archive) const {
  SamplerState s = sampler_.state();
  archive.write("epoch", ::torch::tensor(s.epoch), /*is_buffer=*/true);
  archive.write("position", ::torch::tensor(s.position), /*is_buffer=*/true);
  archive.write("offset", ::torch::tensor(s.offset), /*is_buffer=*/true);
}

void DistributedDataSampler::load(::torch::serialize::InputArchive& archive) {
  ::torch::Tensor epoch, position, offset;
  archive.read("epoch", epoch, /*is_buffer=*/true);
  archive.read("position", position, /*is_buffer=*/true);
  archive.read("offset", offset, /*is_buffer=*/true);
  SamplerState s{epoch.item<int64_t>(), position.item<int64_t>(), offset.item<int64_t>()};
  sampler_.restore(s);
  epoch_ = static_cast<size_t>(s.epoch);
  started_epoch_ = epoch_;
}

size_t DistributedDataSampler::batches_per_epoch(size_t batch_size) const {
  return static_cast<size_t>(sampler_.num_batches(static_cast<int64_t>(batch_size)));
}

std::optional<TensorBatch> next_tensor_batch(DistributedSampler& sampler,
                                             const ::torch::Tensor& data,
                                             const ::torch::Tensor& targets, int64_t batch_size) {
  if (data.size(0) != targets.size(0) || data.size(0) != sampler.options().dataset_size)
    throw InvalidArgument(
        fmt::format("next_tensor_batch: data has {} rows and targets {}, but the sampler covers {}",
                    data.size(0), targets.size(0), sampler.options().dataset_size));
  std::vector<int64_t> indices = sampler.next_batch(batch_size);
  if (indices.empty()) return std::nullopt;
  ::torch::Tensor index = ::torch::tensor(indices, ::torch::kLong).to(data.device());
  return TensorBatch{data.index_select(0, index), targets.index_select(0, index)};
}

}  // namespace lockstep::torch
