// Fashion-MNIST as in-memory tensors, normalised once at load time (the whole
// training set is 188 MB of f32, so batches are a cheap index_select).
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/data/example.h"
#include "lockstep/data/idx.h"
#include "lockstep/data/record_index.h"
#include "lockstep/data/record_io.h"

namespace lockstep::examples {

struct FashionSplit {
  torch::Tensor images;  // [N, 1, 28, 28] f32, normalised
  torch::Tensor labels;  // [N] i64
  int64_t size() const { return labels.size(0); }
};

// Mean and standard deviation of the Fashion-MNIST training pixels in [0, 1].
inline constexpr double kFashionMean = 0.2860;
inline constexpr double kFashionStd = 0.3530;

// Reads the shards `lockstep convert idx --split <split> --out DIR` wrote
// (index DIR/<split>.index.json; features "image" = 28x28 raw bytes and
// "label"). Bad records raise data::BadRecord naming file, record, offset.
inline data::MnistSplit read_mnist_shards(const std::string& index_path) {
  data::RecordIndex index = data::RecordIndex::load(index_path);
  data::MnistSplit out;
  std::string payload, error;
  for (const auto& shard : index.shards) {
    data::RecordReader reader(shard.path);
    while (reader.next(&payload)) {
      auto example = data::parse_example(payload, &error);
      const data::BytesList* image = example ? example->bytes("image") : nullptr;
      const data::Int64List* label = example ? example->int64s("label") : nullptr;
      if (!image || !label || image->size() != 1 || (*image)[0].size() != 28 * 28 ||
          label->size() != 1)
        throw Error(fmt::format("{}: record {} is not a 28x28 Fashion-MNIST example ({}); "
                                "write shards with `lockstep convert idx`",
                                shard.path, reader.record_index() - 1,
                                example ? "missing image/label" : error));
      out.images.bytes.insert(out.images.bytes.end(), (*image)[0].begin(), (*image)[0].end());
      out.labels.bytes.push_back(static_cast<uint8_t>((*label)[0]));
    }
  }
  auto n = static_cast<uint32_t>(out.labels.bytes.size());
  out.images.dims = {n, 28, 28};
  out.labels.dims = {n};
  return out;
}

// `dir` holds either record shards (<split>.index.json) or the IDX files.
// Throws lockstep::Error (naming the Debian package dataset-fashion-mnist
// when the folder is missing). `limit` > 0 keeps the first `limit` samples.
inline FashionSplit load_fashion_split(const std::string& dir, const std::string& split,
                                       int64_t limit = 0) {
  auto index = std::filesystem::path(dir) / (split + ".index.json");
  data::MnistSplit raw = std::filesystem::exists(index) ? read_mnist_shards(index.string())
                                                        : data::load_mnist_split(dir, split);
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
