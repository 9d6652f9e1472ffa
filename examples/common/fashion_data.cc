#include "common/fashion_data.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/data/idx.h"
#include "lockstep/data/loader.h"

namespace lockstep::examples {
namespace {

::torch::Tensor normalised(::torch::Tensor pixels_u8) {
  return pixels_u8.to(::torch::kFloat32).div_(255.0).sub_(kFashionMean).div_(kFashionStd);
}

FashionSplit from_idx(const std::string& dir, const std::string& split, FashionLoadReport& report) {
  data::MnistSplit raw = data::load_mnist_split(dir, split);
  const auto n = static_cast<int64_t>(raw.labels.count());
  report.source = "idx";
  report.expected = static_cast<uint64_t>(n);
  FashionSplit out;
  out.images =
      normalised(::torch::from_blob(raw.images.bytes.data(), {n, 1, 28, 28}, ::torch::kUInt8));
  out.labels =
      ::torch::from_blob(raw.labels.bytes.data(), {n}, ::torch::kUInt8).to(::torch::kInt64);
  return out;
}

// One pass of a single-rank loader: no shuffle buffer, one segment at a
// time, so the order is the seed-0 block order and does not depend on timing.
FashionSplit from_source(const data::SourceSpec& spec, const FashionLoadOptions& options,
                         FashionLoadReport& report) {
  const std::string& index_path = spec.paths.front();
  data::DecodeOptions decode;
  decode.mean = {static_cast<float>(kFashionMean)};
  decode.stddev = {static_cast<float>(kFashionStd)};
  data::Loader loader = data::LoaderBuilder(index_path)
                            .source(spec)
                            .rank(0, 1)
                            .seed(0)
                            .assignment(data::Assignment::kPartition, data::Remainder::kDrop)
                            .batch(4096)
                            .interleave(1)
                            .shuffle(0)
                            .threads(2)
                            .prefetch(2)
                            .bad_data(options.bad_data)
                            .decode(decode)
                            .build();
  report.source = data::format_name(loader.source().format());
  report.expected = loader.records_per_epoch();
  std::vector<::torch::Tensor> images, labels;
  loader.start_epoch(0);
  while (auto batch = loader.next()) {
    if (batch->size() == 0) continue;
    if (batch->shape != std::vector<int64_t>{static_cast<int64_t>(batch->size()), 1, 28, 28})
      throw Error(
          fmt::format("{}: records decode to shape [{}], not 1x28x28 Fashion-MNIST "
                      "images; write them with `lockstep convert idx`",
                      index_path, fmt::join(batch->shape, ", ")));
    auto n = static_cast<int64_t>(batch->size());
    images.push_back(
        ::torch::from_blob(batch->data.data(), {n, 1, 28, 28}, ::torch::kFloat32).clone());
    labels.push_back(::torch::from_blob(batch->labels.data(), {n}, ::torch::kInt64).clone());
  }
  data::SkipReport skips = loader.skip_report();
  report.skipped = skips.skipped;
  report.first_reasons = skips.first_reasons;
  if (images.empty())
    throw Error(
        fmt::format("{}: no readable records (the index lists {})", index_path, report.expected));
  return {::torch::cat(images), ::torch::cat(labels)};
}

}  // namespace

FashionSplit load_fashion_split(const std::string& dir, const std::string& split,
                                FashionLoadOptions options, FashionLoadReport* report) {
  FashionLoadReport local;
  FashionLoadReport& r = report ? *report : local;
  data::SourceSpec spec = data::find_split(dir, split);
  FashionSplit out = spec.paths.empty() ? from_idx(dir, split, r) : from_source(spec, options, r);
  if (options.limit > 0 && options.limit < out.size()) {
    out.images = out.images.narrow(0, 0, options.limit).clone();
    out.labels = out.labels.narrow(0, 0, options.limit).clone();
  }
  return out;
}

}  // namespace lockstep::examples
