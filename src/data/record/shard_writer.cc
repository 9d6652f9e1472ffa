#include "lockstep/data/shard_writer.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"

namespace lockstep::data {
namespace fs = std::filesystem;

ShardSetWriter::ShardSetWriter(const std::string& dir, const std::string& name, size_t num_shards) {
  if (num_shards == 0) throw InvalidArgument("ShardSetWriter: num_shards must be at least 1");
  fs::create_directories(dir);
  index_path_ = (fs::path(dir) / (name + ".index.json")).string();
  for (size_t i = 0; i < num_shards; ++i) {
    std::string path = (fs::path(dir) / shard_file_name(name, i, num_shards)).string();
    writers_.push_back(std::make_unique<RecordWriter>(path));
    index_.shards.push_back(ShardInfo{path, 0, {}});
  }
}

void ShardSetWriter::add(std::string_view payload) {
  auto smallest = std::min_element(
      writers_.begin(), writers_.end(),
      [](const auto& a, const auto& b) { return a->bytes_written() < b->bytes_written(); });
  size_t shard = static_cast<size_t>(smallest - writers_.begin());
  std::vector<uint64_t>& offsets = index_.shards[shard].offsets;
  const uint64_t expected = (*smallest)->bytes_written();
  offsets.push_back((*smallest)->write(payload));
  // The index's layout (checked again by RecordIndex::load): each record
  // starts where the previous frame ended.
  LOCKSTEP_DCHECK_EQ(offsets.back(), expected, "shard {}: record {} is not where the last ended",
                     shard, offsets.size() - 1);
  ++records_;
}

uint64_t ShardSetWriter::bytes() const {
  uint64_t n = 0;
  for (const auto& w : writers_) n += w->bytes_written();
  return n;
}

RecordIndex ShardSetWriter::finish() {
  for (size_t i = 0; i < writers_.size(); ++i) {
    writers_[i]->close();
    index_.shards[i].bytes = writers_[i]->bytes_written();
  }
  index_.save(index_path_);
  return index_;
}

}  // namespace lockstep::data
