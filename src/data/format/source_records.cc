// SampleSource over TFRecord shards and their index (record_table.h).
#include <fmt/format.h>

#include "lockstep/data/record_io.h"
#include "lockstep/data/record_table.h"
#include "data/format/source_formats.h"

namespace lockstep::data {
namespace {

class RecordShardSource final : public SampleSource {
 public:
  explicit RecordShardSource(RecordIndex index) : table_(std::move(index)) {
    for (const auto& shard : table_.index().shards) {
      names_.push_back(shard.path);
      records_.push_back(shard.records());
    }
  }

  SourceFormat format() const override { return SourceFormat::kRecords; }

  SegmentData read(const Segment& s) const override {
    const ShardInfo& info = table_.index().shards[s.shard];
    SegmentData data;
    data.segment = s;
    data.base_offset = info.begin_of(s.first);
    data.bytes = table_.read_bytes(s.shard, data.base_offset, info.end_of(s.first, s.count));
    data.ends.reserve(s.count);
    // A truncated file gives fewer bytes than indexed; the frame check of the
    // records past the end reports it.
    for (uint64_t r = s.first; r < s.first + s.count; ++r)
      data.ends.push_back(static_cast<size_t>(
          std::min<uint64_t>(info.end_of(r, 1) - data.base_offset, data.bytes.size())));
    return data;
  }

  void decode(const SegmentData& data, size_t i, const DecodeOptions& options, uint64_t seed,
              Sample* out) const override {
    decode_example_payload(payload(data, i), options, seed, names_[data.segment.shard],
                           data.segment.first + i, offset_of(data, i), out);
  }

  Example example(const SegmentData& data, size_t i) const override {
    return parse_example_payload(payload(data, i), names_[data.segment.shard],
                                 data.segment.first + i, offset_of(data, i));
  }

  uint64_t offset_of(const SegmentData& data, size_t i) const override {
    return table_.index().shards[data.segment.shard].begin_of(data.segment.first + i);
  }

 private:
  std::string_view payload(const SegmentData& data, size_t i) const {
    std::string_view bytes = data.record(i);
    Frame frame =
        parse_indexed_frame({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
    if (frame.problem != Problem::kNone)
      throw BadRecord(frame.problem, names_[data.segment.shard], data.segment.first + i,
                      offset_of(data, i), frame.detail);
    return frame.payload;
  }

  RecordTable table_;
};

}  // namespace

std::unique_ptr<SampleSource> open_record_source(RecordIndex index) {
  return std::make_unique<RecordShardSource>(std::move(index));
}

std::unique_ptr<SampleSource> open_record_source(const std::string& index_path) {
  return open_record_source(RecordIndex::load(index_path));
}

void decode_example_payload(std::string_view payload, const DecodeOptions& options, uint64_t seed,
                            const std::string& file, uint64_t record, uint64_t offset,
                            Sample* out) {
  DecodeFailure failure;
  if (!decode_sample(payload, options, seed, out, &failure))
    throw BadRecord(failure.problem, file, record, offset, failure.detail);
}

Example parse_example_payload(std::string_view payload, const std::string& file, uint64_t record,
                              uint64_t offset) {
  std::string error;
  std::optional<Example> example = parse_example(payload, &error);
  if (!example) throw BadRecord(Problem::kBadExample, file, record, offset, error);
  return std::move(*example);
}

}  // namespace lockstep::data
