// Writes records into N shards of roughly equal byte size, plus their index.
// Single-threaded: one writer per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/data/record_index.h"
#include "lockstep/data/record_io.h"

namespace lockstep::data {

class ShardSetWriter {
 public:
  // Creates `dir` if needed and dir/name-0000k-of-0000N.tfrecord for k < N.
  ShardSetWriter(const std::string& dir, const std::string& name, size_t num_shards);

  // Appends to the currently smallest shard (ties: lowest number), which keeps
  // shard sizes within one record of each other.
  void add(std::string_view payload);
  // Closes the shards and writes dir/name.index.json; returns the index.
  RecordIndex finish();

  uint64_t records() const { return records_; }
  uint64_t bytes() const;
  std::string index_path() const { return index_path_; }

 private:
  std::vector<std::unique_ptr<RecordWriter>> writers_;
  RecordIndex index_;
  std::string index_path_;
  uint64_t records_ = 0;
};

}  // namespace lockstep::data
