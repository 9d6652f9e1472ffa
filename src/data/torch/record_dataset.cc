#include <torch/torch.h>

#include "data/loader/batch_decode.h"
#include "lockstep/data/torch.h"

namespace lockstep::data {

RecordDataset::RecordDataset(const std::string& index_path, DecodeOptions decode, uint64_t seed)
    : table_(std::make_shared<const RecordTable>(RecordIndex::load(index_path))),
      decode_(std::move(decode)),
      seed_(seed) {}

torch::data::Example<> RecordDataset::get(size_t index) {
  auto [shard, record] = table_->locate(index);
  std::string payload = table_->read(index);
  Sample sample;
  DecodeFailure failure;
  if (!decode_sample(payload, decode_, sample_seed(seed_, epoch_, shard, record), &sample,
                     &failure)) {
    const ShardInfo& info = table_->index().shards[shard];
    throw BadRecord(failure.problem, info.path, record, info.begin_of(record), failure.detail);
  }
  torch::Tensor data = torch::from_blob(sample.data.data(), sample.shape, torch::kFloat32).clone();
  return {data, torch::tensor(sample.label, torch::kInt64)};
}

torch::optional<size_t> RecordDataset::size() const { return table_->size(); }

}  // namespace lockstep::data
