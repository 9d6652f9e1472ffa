#include "data/format/dataset_writer.h"
#include "lockstep/data/convert.h"

namespace lockstep::data {

ConvertResult convert_dataset(const SourceSpec& in, const ShardOutput& out) {
  std::unique_ptr<SampleSource> source = open_source(in);
  std::unique_ptr<DatasetWriter> writer = make_dataset_writer(out);
  uint64_t total = source->total_records();
  for_each_record(*source, [&](const SegmentData& data, size_t i) {
    writer->add(source->example(data, i));
    if (out.progress) out.progress(writer->records(), total, writer->bytes());
  });
  return writer->finish();
}

}  // namespace lockstep::data
