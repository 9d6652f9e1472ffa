// TFRecord framing, byte-compatible with TensorFlow's tf.io.TFRecordWriter:
//
//   uint64 length (little-endian)
//   uint32 masked_crc32c(length bytes)
//   byte   payload[length]
//   uint32 masked_crc32c(payload)
//
// RecordWriter / RecordReader are single-threaded objects (one per thread);
// parse_frame is a pure function usable from any thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/data/bad_record.h"
#include "lockstep/data/record_index.h"

namespace lockstep::data {

inline constexpr size_t kHeaderBytes = 12;  // length + its CRC
inline constexpr size_t kFooterBytes = 4;   // payload CRC
inline constexpr size_t framed_size(size_t payload) {
  return kHeaderBytes + payload + kFooterBytes;
}

// Appends the framed record to `out` (used by the writer and by tests).
void append_frame(std::string& out, std::string_view payload);

struct Frame {
  Problem problem = Problem::kNone;
  std::string_view payload;  // valid when problem == kNone; points into the input
  size_t size = 0;           // bytes the frame occupies; 0 when the length is unknown
  std::string detail;        // for a problem: e.g. "stored crc 0x.. computed 0x.."
};
// Validates the record starting at bytes[0]; `bytes` may extend past it.
Frame parse_frame(std::span<const uint8_t> bytes);
// Like parse_frame for a record whose extent an index gave: the frame must
// fill `bytes` exactly, else the index is stale (reported as kLengthCrc).
// Empty `bytes` (the file ends before the record) is kIndexMismatch.
Frame parse_indexed_frame(std::span<const uint8_t> bytes);

// Writes framed records to a new file (truncating it). Throws Error on I/O failure.
class RecordWriter {
 public:
  explicit RecordWriter(std::string path);
  ~RecordWriter();  // closes; errors at this point are logged, call close() to see them
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  // Returns the byte offset at which the record starts.
  uint64_t write(std::string_view payload);
  void close();
  uint64_t bytes_written() const { return offset_; }
  uint64_t records_written() const { return records_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t offset_ = 0;
  uint64_t records_ = 0;
  std::string frame_;
};

// Reads a record file front to back, e.g. a shard written by TensorFlow.
// With kThrow a bad record raises BadRecord; with kSkip a payload CRC mismatch
// skips one record, while a bad length or a truncation ends the file (the
// next record cannot be located), counted in skipped().
//
// Given the shard's index entry (ShardInfo), it also checks the file against
// it: every record must start at its indexed offset, and the file must hold
// exactly the indexed records. A file that ends early, even cleanly at a
// record boundary, is kIndexMismatch naming the first missing record (with
// kSkip every missing record is counted); records beyond the index are
// kIndexMismatch too (with kSkip counted, not returned). Without it, the end
// of the file is the end of the data: use it only where no index exists.
class RecordReader {
 public:
  explicit RecordReader(std::string path, BadDataPolicy policy = BadDataPolicy::kThrow);
  explicit RecordReader(const ShardInfo& shard, BadDataPolicy policy = BadDataPolicy::kThrow);
  ~RecordReader();
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  // Next payload into *payload; false at the end of the file.
  bool next(std::string* payload);
  uint64_t record_index() const { return index_; }  // of the next record
  uint64_t offset() const { return offset_; }       // of the next record
  uint64_t skipped() const { return skipped_; }
  const std::string& first_skip_reason() const { return first_skip_reason_; }

 private:
  bool fill(size_t needed);  // ensures `needed` unread bytes; false at EOF
  std::span<const uint8_t> unread() const;
  void fail(const Frame& frame);
  void fail_index(const std::string& detail, uint64_t count);
  bool end_of_file();
  uint64_t indexed_remaining() const;

  std::string path_;
  BadDataPolicy policy_;
  std::FILE* file_ = nullptr;
  std::string buffer_;
  size_t pos_ = 0;  // first unread byte in buffer_
  uint64_t index_ = 0;
  uint64_t offset_ = 0;
  uint64_t skipped_ = 0;
  bool done_ = false;
  std::string first_skip_reason_;
  std::vector<uint64_t> indexed_offsets_;  // from the ShardInfo, when given
  uint64_t indexed_bytes_ = 0;
  bool indexed_ = false;
};

}  // namespace lockstep::data
