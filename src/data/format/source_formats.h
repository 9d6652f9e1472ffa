// Internal: the SampleSource of each format (source.h), built by open_source.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lockstep/data/record_index.h"
#include "lockstep/data/source.h"

namespace lockstep::data {

std::unique_ptr<SampleSource> open_record_source(const std::string& index_path);
std::unique_ptr<SampleSource> open_record_source(RecordIndex index);
std::unique_ptr<SampleSource> open_hdf5_source(const SourceSpec& spec);
std::unique_ptr<SampleSource> open_lmdb_source(const std::vector<std::string>& paths);

// Shared by formats whose values are tf.train.Example payloads: decodes
// `payload` or throws BadRecord naming `file`, record and offset.
void decode_example_payload(std::string_view payload, const DecodeOptions& options, uint64_t seed,
                            const std::string& file, uint64_t record, uint64_t offset, Sample* out);
Example parse_example_payload(std::string_view payload, const std::string& file, uint64_t record,
                              uint64_t offset);

}  // namespace lockstep::data
