#include "lockstep/data/record_index.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"
#include "lockstep/data/record_io.h"

namespace lockstep::data {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "lockstep-record-index";

ShardInfo shard_from_json(const nlohmann::json& j, const fs::path& dir) {
  ShardInfo shard;
  shard.path = (dir / j.at("file").get<std::string>()).string();
  shard.bytes = j.at("bytes").get<uint64_t>();
  shard.offsets = j.at("offsets").get<std::vector<uint64_t>>();
  if (shard.offsets.size() != j.at("records").get<uint64_t>())
    throw Error(
        fmt::format("shard {}: 'records' disagrees with the number of offsets", shard.path));
  shard.check_layout();
  return shard;
}

}  // namespace

// The read side of the layout ShardSetWriter asserts as it writes.
void ShardInfo::check_layout() const {
  for (size_t r = 0; r < offsets.size(); ++r) {
    const uint64_t end = end_of(r, 1);
    if (offsets[r] > end || end - offsets[r] < framed_size(0))
      throw Error(
          fmt::format("shard {}: record {} spans bytes [{}, {}), less than a {}-byte "
                      "frame (offsets must rise, and end by the shard's {} bytes)",
                      path, r, offsets[r], end, framed_size(0), bytes));
  }
}

uint64_t RecordIndex::total_records() const {
  uint64_t n = 0;
  for (const auto& s : shards) n += s.records();
  return n;
}

RecordIndex RecordIndex::load(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw Error(
        fmt::format("cannot open record index {}: create it with 'lockstep convert' "
                    "(or 'lockstep convert index' for existing TFRecord files)",
                    path));
  RecordIndex index;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.value("format", "") != kFormat || j.value("version", 0) != 1)
      throw Error("not a lockstep-record-index version 1");
    fs::path dir = fs::path(path).parent_path();
    for (const auto& s : j.at("shards")) index.shards.push_back(shard_from_json(s, dir));
  } catch (const std::exception& e) {
    throw Error(fmt::format("record index {} is invalid: {}; re-create it", path, e.what()));
  }
  return index;
}

void RecordIndex::save(const std::string& path) const {
  fs::path dir = fs::path(path).parent_path();
  nlohmann::json shards_json = nlohmann::json::array();
  for (const auto& s : shards) {
    shards_json.push_back({{"file", fs::relative(s.path, dir.empty() ? "." : dir).string()},
                           {"bytes", s.bytes},
                           {"records", s.records()},
                           {"offsets", s.offsets}});
  }
  nlohmann::json j = {{"format", kFormat}, {"version", 1}, {"shards", shards_json}};
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump() << "\n";
    if (!out) throw Error(fmt::format("cannot write record index {} (disk full?)", tmp));
  }
  fs::rename(tmp, path);  // readers never see a half-written index
}

RecordIndex build_index(const std::vector<std::string>& files) {
  RecordIndex index;
  for (const auto& file : files) {
    ShardInfo shard;
    shard.path = file;
    RecordReader reader(file);
    std::string payload;
    for (uint64_t offset = reader.offset(); reader.next(&payload); offset = reader.offset())
      shard.offsets.push_back(offset);
    shard.bytes = reader.offset();
    index.shards.push_back(std::move(shard));
  }
  return index;
}

std::string shard_file_name(const std::string& name, size_t shard, size_t num_shards) {
  return fmt::format("{}-{:05d}-of-{:05d}.tfrecord", name, shard, num_shards);
}

}  // namespace lockstep::data
