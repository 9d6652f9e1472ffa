#include "data/format/dataset_writer.h"

#include "lockstep/data/shard_writer.h"

namespace lockstep::data {
namespace {

class RecordShardWriter final : public DatasetWriter {
 public:
  explicit RecordShardWriter(const ShardOutput& out) : writer_(out.dir, out.name, out.shards) {}
  void add(const Example& example) override { writer_.add(serialize_example(example)); }
  uint64_t records() const override { return writer_.records(); }
  uint64_t bytes() const override { return writer_.bytes(); }
  ConvertResult finish() override {
    writer_.finish();
    return {writer_.records(), writer_.bytes(), writer_.index_path(), {writer_.index_path()}};
  }

 private:
  ShardSetWriter writer_;
};

}  // namespace

std::unique_ptr<DatasetWriter> make_dataset_writer(const ShardOutput& out) {
  switch (out.format) {
    case SourceFormat::kHdf5: return make_hdf5_writer(out);
    case SourceFormat::kLmdb: return make_lmdb_writer(out);
    case SourceFormat::kRecords: break;
  }
  return std::make_unique<RecordShardWriter>(out);
}

}  // namespace lockstep::data
