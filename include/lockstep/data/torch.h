// LibTorch face of the data layer (target lockstep::data_torch): the loader's
// batches as tensors, and a torch::data dataset for users of that API.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>

#include "lockstep/data/loader.h"
#include "lockstep/data/record_table.h"

namespace lockstep::data {

struct TensorBatch {
  torch::Tensor data;    // float32 {n, C, H, W}
  torch::Tensor target;  // int64 {n}
};

// Wraps the batch's buffers without copying; the tensors own them.
TensorBatch to_tensors(HostBatch batch);
// The hand-off to a GPU: the batch is copied into pinned host memory and
// from there to `device` with non-blocking copies queued on the current
// stream, so the host goes on decoding the next batch while they run (the
// pinned buffers stay alive until the copies ran). A CPU device returns the
// batch as is.
TensorBatch to_device(const TensorBatch& batch, torch::Device device);

// Loader yielding tensors. Same thread-safety as Loader (one consumer).
//   TensorLoader loader(options);
//   for (auto& batch : loader.epoch(e)) train_step(batch.data, batch.target);
class TensorLoader {
 public:
  explicit TensorLoader(LoaderOptions options) : loader_(std::move(options)) {}
  explicit TensorLoader(Loader loader) : loader_(std::move(loader)) {}

  void start_epoch(uint64_t epoch) { loader_.start_epoch(epoch); }
  std::optional<TensorBatch> next();
  Loader& host() { return loader_; }

  class Iterator {
   public:
    using value_type = TensorBatch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    explicit Iterator(TensorLoader* owner) : owner_(owner) { ++*this; }
    TensorBatch& operator*() { return *current_; }
    TensorBatch* operator->() { return &*current_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return !current_ && !other.current_; }

   private:
    TensorLoader* owner_ = nullptr;
    std::optional<TensorBatch> current_;
  };
  struct EpochRange {
    TensorLoader* owner;
    Iterator begin() { return Iterator(owner); }
    Iterator end() { return Iterator(); }
  };
  // Starts `epoch` and returns its batches as a single-pass range.
  EpochRange epoch(uint64_t epoch) {
    start_epoch(epoch);
    return {this};
  }

 private:
  Loader loader_;
};

// Random-access dataset over an indexed shard set, for
// torch::data::make_data_loader (with e.g. DistributedRandomSampler). Each
// get() is one pread + decode; bad records throw BadRecord (no skip policy:
// the loader has no way to drop an index). Copies share the open files;
// get() is thread-safe, so the loader's workers may share it.
class RecordDataset : public torch::data::datasets::Dataset<RecordDataset> {
 public:
  RecordDataset(const std::string& index_path, DecodeOptions decode = {}, uint64_t seed = 0);
  // Augmentations are seeded by (seed, epoch, record); call per epoch.
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  torch::data::Example<> get(size_t index) override;
  torch::optional<size_t> size() const override;

 private:
  std::shared_ptr<const RecordTable> table_;
  DecodeOptions decode_;
  uint64_t seed_;
  uint64_t epoch_ = 0;
};

}  // namespace lockstep::data
