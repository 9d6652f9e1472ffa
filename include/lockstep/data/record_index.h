// The index of a set of record shards: per shard its file, byte size and the
// byte offset of every record, so rank assignment and random access need no
// scan of the data. Stored as JSON (`<name>.index.json`) next to the shards,
// with file names relative to the index's folder:
//
//   {"format": "lockstep-record-index", "version": 1,
//    "shards": [{"file": "train-00000-of-00004.tfrecord", "bytes": 123,
//                "records": 2, "offsets": [0, 61]}, ...]}
//
// A RecordIndex is a value; concurrent reads are safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::data {

struct ShardInfo {
  std::string path;               // resolved (index folder + file name)
  uint64_t bytes = 0;             // file size when indexed
  std::vector<uint64_t> offsets;  // start of each record

  uint64_t records() const { return offsets.size(); }
  // Byte range [begin, end) of records [first, first + count).
  uint64_t begin_of(uint64_t first) const {
    return first < offsets.size() ? offsets[first] : bytes;
  }
  uint64_t end_of(uint64_t first, uint64_t count) const { return begin_of(first + count); }
  // Throws Error naming the shard and the record unless every record spans
  // at least an empty frame (offsets rise) and the last ends by `bytes`: the
  // layout the writer produces, checked wherever an index comes from outside.
  void check_layout() const;
};

struct RecordIndex {
  std::vector<ShardInfo> shards;

  uint64_t total_records() const;
  // Throws Error naming the file when it is missing or not an index.
  static RecordIndex load(const std::string& path);
  // Writes file names relative to the index's folder.
  void save(const std::string& path) const;
};

// Indexes existing record files (e.g. written by TensorFlow) by scanning them
// once; throws BadRecord on a corrupt frame.
RecordIndex build_index(const std::vector<std::string>& files);

// "name-00003-of-00016.tfrecord", the naming TensorFlow datasets use.
std::string shard_file_name(const std::string& name, size_t shard, size_t num_shards);

}  // namespace lockstep::data
