#include <torch/torch.h>

#include "lockstep/data/torch.h"

namespace lockstep::data {
namespace {

// A tensor over the vector's buffer that keeps the vector alive.
template <typename T>
torch::Tensor adopt(std::vector<T>&& values, std::vector<int64_t> shape, torch::Dtype dtype) {
  auto* owned = new std::vector<T>(std::move(values));
  return torch::from_blob(
      owned->data(), shape, [owned](void*) { delete owned; }, torch::TensorOptions(dtype));
}

}  // namespace

TensorBatch to_tensors(HostBatch batch) {
  auto n = static_cast<int64_t>(batch.labels.size());
  return {adopt(std::move(batch.data), batch.shape, torch::kFloat32),
          adopt(std::move(batch.labels), {n}, torch::kInt64)};
}

TensorBatch to_device(const TensorBatch& batch, torch::Device device) {
  if (!device.is_cuda()) return batch;
  return {batch.data.pin_memory().to(device, /*non_blocking=*/true),
          batch.target.pin_memory().to(device, /*non_blocking=*/true)};
}

std::optional<TensorBatch> TensorLoader::next() {
  std::optional<HostBatch> batch = loader_.next();
  if (!batch) return std::nullopt;
  return to_tensors(std::move(*batch));
}

TensorLoader::Iterator& TensorLoader::Iterator::operator++() {
  current_ = owner_->next();
  return *this;
}

}  // namespace lockstep::data
