// Feeding a rank its share of the data: a sampler for LibTorch's
// torch::data DataLoader and a helper that returns batches as tensors.
//
// DistributedDataSampler has the shape of LibTorch's DistributedRandomSampler
// (it derives from torch::data::samplers::DistributedSampler<>: size,
// num_replicas, rank, allow_duplicates; set_epoch()/epoch()) but draws its
// indices from lockstep's DistributedSampler (sampler.h): every rank gets the
// same number of indices, hence the same number of batches (allow_duplicates
// pads by wrapping around, else the remainder is dropped), ranks' indices are
// disjoint, and the order is reproducible from the seed on any platform.
//
// Epochs: the DataLoader calls reset() at every begin(). Because it owns its
// sampler (make_data_loader moves it in), the caller usually cannot reach
// set_epoch() any more, so a reset() that finds the epoch unchanged since the
// previous one moves to the next epoch (LibTorch's own sampler would repeat
// the first epoch's order). Calling set_epoch(e) before begin() still
// chooses epoch e.
//
//   auto dataset = MyDataset().map(torch::data::transforms::Stack<>());
//   const size_t n = *dataset.size();  // before the move below
//   auto loader = torch::data::make_data_loader(
//       std::move(dataset), lt::DistributedDataSampler(n), torch::data::DataLoaderOptions(64));
//   for (int epoch = 0; epoch < epochs; ++epoch)
//     for (auto& batch : *loader) { ... }   // a new shuffle each epoch
//
// Thread-safety: as any LibTorch sampler, used by one DataLoader at a time.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "lockstep/torch/collectives.h"
#include "lockstep/torch/sampler.h"

namespace lockstep::torch {

class DistributedDataSampler : public ::torch::data::samplers::DistributedSampler<> {
 public:
  // num_replicas/rank default to this process's world (init() first).
  // Throws InvalidArgument for a rank outside [0, num_replicas).
  explicit DistributedDataSampler(
      size_t size, size_t num_replicas = static_cast<size_t>(lockstep::torch::size()),
      size_t rank = static_cast<size_t>(lockstep::torch::rank()), bool allow_duplicates = true,
      uint64_t seed = 0);

  // Starts an epoch (see the top of this file); new_size: the dataset's new
  // size. (LibTorch 1.13 samplers take c10::optional, not std::optional.)
  void reset(c10::optional<size_t> new_size = c10::nullopt) override;
  // Up to batch_size indices; nullopt once this rank's share of the epoch is used up.
  c10::optional<std::vector<size_t>> next(size_t batch_size) override;
  // Epoch and position (a resumed loader continues with the next unseen batch).
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

  // Batches this rank gets per epoch (the same on every rank).
  size_t batches_per_epoch(size_t batch_size) const;
  // (Qualified: inside this class, DistributedSampler names LibTorch's base.)
  const lockstep::torch::DistributedSampler& indices() const { return sampler_; }

 private:
  DistributedSamplerOptions options_;
  lockstep::torch::DistributedSampler sampler_;
  std::optional<size_t> started_epoch_;  // the epoch the last reset() began
};

// Rows of `data` and `targets` (dim 0) for this rank's next batch of
// `sampler`, gathered with index_select; nullopt at the end of the epoch.
// Spares every user the from_blob + index_select over next_batch()'s indices.
struct TensorBatch {
  ::torch::Tensor data;
  ::torch::Tensor target;
};
std::optional<TensorBatch> next_tensor_batch(DistributedSampler& sampler,
                                             const ::torch::Tensor& data,
                                             const ::torch::Tensor& targets, int64_t batch_size);

}  // namespace lockstep::torch
