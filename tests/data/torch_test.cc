// The LibTorch face: tensors from the loader and the torch::data dataset.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <set>

#include "lockstep/data/example.h"
#include "lockstep/data/shard_writer.h"
#include "lockstep/data/torch.h"
#include "test_util.h"

namespace lockstep::data {
namespace {

using testing::TempDir;

std::string make_dataset(const TempDir& dir, int records) {
  ShardSetWriter writer(dir.str(), "t", 2);
  for (int i = 0; i < records; ++i) {
    Example e;
    e.set_bytes("image", std::string(6, static_cast<char>(i)))
        .set_int64s("label", {i})
        .set_int64s("shape", {2, 3})
        .set_bytes("format", "raw");
    writer.add(serialize_example(e));
  }
  writer.finish();
  return writer.index_path();
}

TEST(TensorLoader, RangeForYieldsFloatDataAndInt64Targets) {
  TempDir dir;
  LoaderOptions o;
  o.index_path = make_dataset(dir, 10);
  o.batch_size = 4;
  TensorLoader loader(o);
  std::vector<int64_t> sizes;
  std::set<int64_t> labels;
  for (auto& batch : loader.epoch(0)) {
    EXPECT_EQ(batch.data.dtype(), torch::kFloat32);
    EXPECT_EQ(batch.target.dtype(), torch::kInt64);
    EXPECT_EQ(batch.data.sizes(), (std::vector<int64_t>{batch.target.size(0), 1, 2, 3}));
    sizes.push_back(batch.target.size(0));
    for (int64_t i = 0; i < batch.target.size(0); ++i) {
      int64_t label = batch.target[i].item<int64_t>();
      labels.insert(label);
      EXPECT_FLOAT_EQ(batch.data[i][0][0][0].item<float>(), label / 255.0f);
    }
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(labels.size(), 10u);
}

TEST(RecordDataset, WorksWithMakeDataLoader) {
  TempDir dir;
  auto dataset = RecordDataset(make_dataset(dir, 10)).map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(dataset), torch::data::DataLoaderOptions().batch_size(5).workers(2));
  std::set<int64_t> labels;
  int batches = 0;
  for (auto& batch : *loader) {
    ++batches;
    EXPECT_EQ(batch.data.sizes(), (std::vector<int64_t>{5, 1, 2, 3}));
    for (int64_t i = 0; i < 5; ++i) labels.insert(batch.target[i].item<int64_t>());
  }
  EXPECT_EQ(batches, 2);
  EXPECT_EQ(labels.size(), 10u);
}

}  // namespace
}  // namespace lockstep::data
