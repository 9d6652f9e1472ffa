// Where a data set lives and how the loader reads it.
//
// A SampleSource is a list of shards, each a run of records numbered from 0.
// The loader plans an epoch as segments of consecutive records (assign.h),
// reads each segment with one sequential read (read()), and decodes each
// record into a Sample on its decode threads (decode()). Three formats ship:
//
//   records  TFRecord shards + <name>.index.json (record_index.h); each record
//            a framed, CRC-checked tf.train.Example
//   hdf5     HDF5 files, each with an image dataset [N, H, W] or [N, H, W, C]
//            (uint8, or float32/float64 used unscaled) and a label dataset [N]
//            (any integer type): /images and /labels unless named otherwise.
//            Several files form one data set (one shard each). Segments are
//            hyperslab reads; block sizes are rounded up to the chunking.
//   lmdb     LMDB environments opened read-only; records are the entries in
//            key order, each value a serialized tf.train.Example exactly as in
//            record shards (raw pixels, PNG or JPEG inside)
//
// Thread-safety: a SampleSource is immutable after construction; read() and
// decode() may run on many threads at once. Ownership: the source owns its
// open files and handles; SegmentData owns its bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/data/assign.h"
#include "lockstep/data/example.h"
#include "lockstep/data/sample.h"

namespace lockstep::data {

enum class SourceFormat { kRecords, kHdf5, kLmdb };
const char* format_name(SourceFormat format);  // "records", "hdf5", "lmdb"
// Parses "records" / "hdf5" / "lmdb"; throws InvalidArgument listing them.
SourceFormat parse_format(const std::string& name);

struct SourceSpec {
  // One <name>.index.json; or one or more HDF5 files; or one or more LMDB
  // environment folders. All of one format.
  std::vector<std::string> paths;
  std::string images_dataset = "/images";  // HDF5 only
  std::string labels_dataset = "/labels";  // HDF5 only
};

// The bytes of one segment of one shard, as read by SampleSource::read().
struct SegmentData {
  Segment segment;
  std::string bytes;             // the records back to back
  std::vector<size_t> ends;      // record i is bytes[i ? ends[i-1] : 0, ends[i])
  std::vector<int64_t> labels;   // formats that keep labels apart (HDF5)
  std::vector<std::string> bad;  // per record: why it could not be read ("" = fine); may be empty
  uint64_t base_offset = 0;      // file offset of bytes[0] (records: where offsets mean bytes)

  size_t size() const { return ends.size(); }
  std::string_view record(size_t i) const {
    size_t begin = i ? ends[i - 1] : 0;
    return std::string_view(bytes).substr(begin, ends[i] - begin);
  }
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  SampleSource(const SampleSource&) = delete;
  SampleSource& operator=(const SampleSource&) = delete;

  virtual SourceFormat format() const = 0;
  size_t shards() const { return records_.size(); }
  uint64_t records(uint32_t shard) const { return records_[shard]; }
  const std::vector<uint64_t>& shard_records() const { return records_; }
  uint64_t total_records() const;
  // A name for messages: the file (and dataset) the shard is.
  const std::string& shard_name(uint32_t shard) const { return names_[shard]; }

  // Records per block the loader should read as one unit: `requested`
  // rounded up to the storage's chunking (HDF5), unchanged elsewhere.
  virtual uint64_t align_block(uint64_t requested) const { return requested; }
  // Reads records [first, first + count) of one shard. Throws Error for an
  // I/O failure that names the file; a record that cannot be read is marked
  // in SegmentData::bad so that decode() reports it as a BadRecord.
  virtual SegmentData read(const Segment& segment) const = 0;
  // Decodes record i of `data` (augmented, normalised). Throws BadRecord
  // naming shard, record and offset.
  virtual void decode(const SegmentData& data, size_t i, const DecodeOptions& options,
                      uint64_t seed, Sample* out) const = 0;
  // Record i as a tf.train.Example ("image" raw/PNG/JPEG bytes, "label",
  // "shape" for raw pixels, ...), for converting between formats. Throws
  // BadRecord.
  virtual Example example(const SegmentData& data, size_t i) const = 0;
  // Byte offset of record i for messages (0 where the format has none).
  virtual uint64_t offset_of(const SegmentData& data, size_t i) const { return 0; }

 protected:
  SampleSource() = default;
  std::vector<std::string> names_;
  std::vector<uint64_t> records_;
};

// The format of one path: *.index.json -> records; a file starting with the
// HDF5 signature (or named *.h5/*.hdf5) -> hdf5; a folder holding data.mdb ->
// lmdb. Throws Error naming the path and what was expected.
SourceFormat detect_format(const std::string& path);

// Opens a data set; throws Error naming the file (and HDF5 dataset) for a
// missing file or dataset, mismatched lengths, an unsupported dtype, or a
// corrupt or truncated file.
std::unique_ptr<SampleSource> open_source(const SourceSpec& spec);

// A split ("train", "t10k", ...) in a folder written by `lockstep convert`,
// in any format: DIR/<split>.index.json, DIR/<split>.h5, DIR/<split>-*.h5
// (sorted), or DIR/<split>.lmdb. Empty paths when none exists.
SourceSpec find_split(const std::string& dir, const std::string& split);

// Reads every record of `source` in shard order (for converters and for
// programs that keep a small data set in memory). `fn(example_or_sample...)`
// is called with the segment and the record's position in it.
template <typename Fn>
void for_each_record(const SampleSource& source, Fn&& fn, uint64_t block = 4096) {
  for (uint32_t s = 0; s < source.shards(); ++s)
    for (uint64_t first = 0; first < source.records(s); first += block) {
      SegmentData data = source.read({s, first, std::min(block, source.records(s) - first)});
      for (size_t i = 0; i < data.size(); ++i) fn(data, i);
    }
}

}  // namespace lockstep::data
