#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <tuple>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/data/record_index.h"
#include "lockstep/data/shard_writer.h"
#include "test_util.h"

namespace lockstep::data {
namespace {

using testing::read_file;
using testing::TempDir;

std::string payload_for(int i) {
  return std::string(size_t(10 + (i * 37) % 300), char('a' + i % 26));
}

TEST(ShardSetWriter, WritesNamedShardsOfNearlyEqualSize) {
  TempDir dir;
  ShardSetWriter writer(dir.str(), "train", 4);
  for (int i = 0; i < 1000; ++i) writer.add(payload_for(i));
  RecordIndex index = writer.finish();
  ASSERT_EQ(index.shards.size(), 4u);
  EXPECT_EQ(index.total_records(), 1000u);
  uint64_t smallest = UINT64_MAX, largest = 0;
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(std::filesystem::path(index.shards[s].path).filename(),
              "train-0000" + std::to_string(s) + "-of-00004.tfrecord");
    EXPECT_EQ(std::filesystem::file_size(index.shards[s].path), index.shards[s].bytes);
    smallest = std::min(smallest, index.shards[s].bytes);
    largest = std::max(largest, index.shards[s].bytes);
  }
  EXPECT_LE(largest - smallest, framed_size(310));  // within one record
  EXPECT_TRUE(std::filesystem::exists(dir / "train.index.json"));
}

TEST(RecordIndex, OffsetsLocateEveryRecordAndSurviveSaveLoad) {
  TempDir dir;
  ShardSetWriter writer(dir.str(), "set", 3);
  for (int i = 0; i < 200; ++i) writer.add(payload_for(i));
  writer.finish();
  RecordIndex index = RecordIndex::load(dir / "set.index.json");
  ASSERT_EQ(index.total_records(), 200u);
  std::vector<std::string> seen;
  for (const auto& shard : index.shards) {
    std::string bytes = read_file(shard.path);
    for (uint64_t r = 0; r < shard.records(); ++r) {
      uint64_t begin = shard.begin_of(r), end = shard.end_of(r, 1);
      Frame frame =
          parse_frame({reinterpret_cast<const uint8_t*>(bytes.data()) + begin, end - begin});
      ASSERT_EQ(frame.problem, Problem::kNone);
      ASSERT_EQ(frame.size, end - begin);
      seen.emplace_back(frame.payload);
    }
  }
  std::vector<std::string> expected;
  for (int i = 0; i < 200; ++i) expected.push_back(payload_for(i));
  std::sort(seen.begin(), seen.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);
}

TEST(RecordIndex, BuildIndexByScanningMatchesWriterIndex) {
  TempDir dir;
  ShardSetWriter writer(dir.str(), "scan", 2);
  for (int i = 0; i < 50; ++i) writer.add(payload_for(i));
  RecordIndex written = writer.finish();
  RecordIndex scanned = build_index({written.shards[0].path, written.shards[1].path});
  ASSERT_EQ(scanned.shards.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(scanned.shards[s].offsets, written.shards[s].offsets);
    EXPECT_EQ(scanned.shards[s].bytes, written.shards[s].bytes);
  }
}

TEST(RecordIndex, MissingOrInvalidIndexNamesTheFile) {
  TempDir dir;
  EXPECT_THROW(RecordIndex::load(dir / "nope.index.json"), Error);
  testing::write_file(dir / "bad.index.json", "{\"format\": \"other\"}");
  try {
    RecordIndex::load(dir / "bad.index.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.index.json"), std::string::npos);
  }
}

// The layout ShardSetWriter asserts as it writes is checked again where an
// index comes back from disk: offsets that do not rise by at least an empty
// frame (16 bytes) or run past the shard's size are refused, naming the
// shard and the record, before a reader computes a negative span from them.
TEST(RecordIndex, OffsetsThatDoNotRiseByAFrameAreRefusedAtLoad) {
  TempDir dir;
  auto index_with = [&](const std::string& offsets, int records, int bytes) {
    testing::write_file(dir / "set.index.json",
                        fmt::format(R"({{"format": "lockstep-record-index", "version": 1,
                                       "shards": [{{"file": "s.tfrecord", "bytes": {},
                                                   "records": {}, "offsets": [{}]}}]}})",
                                    bytes, records, offsets));
    return dir / "set.index.json";
  };
  EXPECT_EQ(RecordIndex::load(index_with("0, 26, 62", 3, 108)).shards[0].records(), 3u);
  for (auto [offsets, bytes, bad] :
       {std::tuple{"0, 62, 26", 108, "record 1 spans bytes [62, 26)"},
        std::tuple{"0, 26, 30", 108, "record 1 spans bytes [26, 30)"},
        std::tuple{"0, 26, 62", 70, "record 2 spans bytes [62, 70)"}}) {
    try {
      RecordIndex::load(index_with(offsets, 3, bytes));
      ADD_FAILURE() << "offsets " << offsets << " of " << bytes << " bytes were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("s.tfrecord"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lockstep::data
