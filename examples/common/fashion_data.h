// Fashion-MNIST as in-memory tensors, normalised once at load time (the whole
// training set is 188 MB of f32, so batches are a cheap index_select).
#pragma once

#include <torch/torch.h>

#include <string>

#include "lockstep/data/idx.h"

namespace lockstep::examples {

struct FashionSplit {
  torch::Tensor images;  // [N, 1, 28, 28] f32, normalised
  torch::Tensor labels;  // [N] i64
  int64_t size() const { return labels.size(0); }
};

// Mean and standard deviation of the Fashion-MNIST training pixels in [0, 1].
inline constexpr double kFashionMean = 0.2860;
inline constexpr double kFashionStd = 0.3530;

// Throws lockstep::Error (naming the Debian package dataset-fashion-mnist
// when the folder is missing). `limit` > 0 keeps the first `limit` samples.
inline FashionSplit load_fashion_split(const std::string& dir, const std::string& split,
                                       int64_t limit = 0) {
  data::MnistSplit raw = data::load_mnist_split(dir, split);
  const auto n = static_cast<int64_t>(raw.labels.count());
  FashionSplit out;
  out.images = torch::from_blob(raw.images.bytes.data(), {n, 1, 28, 28}, torch::kUInt8)
                   .to(torch::kFloat32)
                   .div_(255.0)
                   .sub_(kFashionMean)
                   .div_(kFashionStd);
  out.labels = torch::from_blob(raw.labels.bytes.data(), {n}, torch::kUInt8).to(torch::kInt64);
  if (limit > 0 && limit < n) {
    out.images = out.images.narrow(0, 0, limit).clone();
    out.labels = out.labels.narrow(0, 0, limit).clone();
  }
  return out;
}

}  // namespace lockstep::examples
