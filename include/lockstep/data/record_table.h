// Random access to the records of an indexed shard set: record `i` of the
// whole set (shards in index order) read with one pread at its indexed
// offset. Thread-safe: files are opened once and read with pread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/data/record_index.h"

namespace lockstep::data {

class RecordTable {
 public:
  // Opens every shard; throws Error naming a missing one, and BadRecord
  // (kIndexMismatch, naming the file and the offset where its index ends) for
  // a shard with bytes past its last indexed record, and Error for offsets
  // that do not rise by a frame (ShardInfo::check_layout).
  explicit RecordTable(RecordIndex index);
  ~RecordTable();
  RecordTable(const RecordTable&) = delete;
  RecordTable& operator=(const RecordTable&) = delete;

  const RecordIndex& index() const { return index_; }
  uint64_t size() const { return starts_.back(); }
  // (shard, record in shard) of global record i; InvalidArgument unless i < size().
  std::pair<uint32_t, uint64_t> locate(uint64_t i) const;
  // Checked payload of global record i; throws BadRecord.
  std::string read(uint64_t i) const;
  // Bytes [begin, end) of a shard; shorter when the file is (truncated).
  std::string read_bytes(uint32_t shard, uint64_t begin, uint64_t end) const;

 private:
  RecordIndex index_;
  std::vector<int> fds_;
  std::vector<uint64_t> starts_;  // global index of each shard's first record, plus the total
};

}  // namespace lockstep::data
