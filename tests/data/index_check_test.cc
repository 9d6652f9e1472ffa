// Readers check a shard against its index (the bug: a shard cut at a record
// boundary read to EOF trained on 53,636 of 60,000 samples with exit 0).
// Three records of 10, 20 and 30 bytes: offsets 0, 26, 62; 108 bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lockstep/data/record_index.h"
#include "lockstep/data/record_io.h"
#include "lockstep/data/record_table.h"
#include "test_util.h"

namespace lockstep::data {
namespace {

using ::testing::HasSubstr;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

class IndexCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    RecordWriter writer(path_);
    for (size_t n : {10, 20, 30}) shard_.offsets.push_back(writer.write(std::string(n, 'x')));
    writer.close();
    shard_.path = path_;
    shard_.bytes = writer.bytes_written();
    bytes_ = read_file(path_);
  }
  void rewrite(std::string bytes) { write_file(path_, std::move(bytes)); }
  std::vector<std::string> read_all(BadDataPolicy policy, uint64_t* skipped = nullptr) {
    RecordReader reader(shard_, policy);
    std::vector<std::string> out;
    std::string payload;
    while (reader.next(&payload)) out.push_back(payload);
    if (skipped) *skipped = reader.skipped();
    return out;
  }
  void expect_mismatch(uint64_t record, uint64_t offset, const std::string& says) {
    try {
      read_all(BadDataPolicy::kThrow);
      FAIL() << "no error";
    } catch (const BadRecord& e) {
      EXPECT_EQ(e.problem(), Problem::kIndexMismatch) << e.what();
      EXPECT_EQ(e.file(), path_);
      EXPECT_EQ(e.record(), record);
      EXPECT_EQ(e.offset(), offset);
      EXPECT_THAT(e.what(), HasSubstr(path_));
      EXPECT_THAT(e.what(), HasSubstr(says));
    }
  }

  TempDir dir_;
  std::string path_ = dir_ / "three.tfrecord";
  ShardInfo shard_;
  std::string bytes_;
};

TEST_F(IndexCheck, ShardCutAtARecordBoundaryIsAnErrorNamingTheFile) {
  rewrite(bytes_.substr(0, shard_.offsets[2]));  // two whole records
  RecordReader unchecked(path_);                 // what read the shard before
  std::string payload;
  int n = 0;
  while (unchecked.next(&payload)) ++n;
  EXPECT_EQ(n, 2) << "without the index the cut is invisible";
  expect_mismatch(2, shard_.offsets[2], "the file ends after 2 of the 3 records its index lists");
}

TEST_F(IndexCheck, ShardCutAtARecordBoundaryIsCountedUnderSkip) {
  rewrite(bytes_.substr(0, shard_.offsets[1]));  // one whole record
  uint64_t skipped = 0;
  EXPECT_EQ(read_all(BadDataPolicy::kSkip, &skipped).size(), 1u);
  EXPECT_EQ(skipped, 2u);
}

TEST_F(IndexCheck, ShardCutMidRecordCountsEveryLostRecordUnderSkip) {
  rewrite(bytes_.substr(0, shard_.offsets[1] + 5));
  uint64_t skipped = 0;
  EXPECT_EQ(read_all(BadDataPolicy::kSkip, &skipped).size(), 1u);
  EXPECT_EQ(skipped, 2u);  // the torn record and the one after it
}

TEST_F(IndexCheck, RecordsBeyondTheIndexAreAnErrorAndNotDeliveredUnderSkip) {
  std::string extra;
  append_frame(extra, "appended");
  rewrite(bytes_ + extra);
  expect_mismatch(3, shard_.bytes, "records beyond the 3 its index lists");
  uint64_t skipped = 0;
  EXPECT_EQ(read_all(BadDataPolicy::kSkip, &skipped).size(), 3u);
  EXPECT_EQ(skipped, 1u);
}

TEST_F(IndexCheck, RecordAtAnotherOffsetThanIndexedIsAnError) {
  shard_.offsets[1] += 1;  // a stale index
  expect_mismatch(1, shard_.offsets[1] - 1, "its index says");
}

TEST_F(IndexCheck, IntactShardReadsEveryRecord) {
  uint64_t skipped = 1;
  EXPECT_EQ(read_all(BadDataPolicy::kSkip, &skipped).size(), 3u);
  EXPECT_EQ(skipped, 0u);
  EXPECT_EQ(read_all(BadDataPolicy::kThrow).size(), 3u);
}

TEST_F(IndexCheck, RandomAccessToARecordPastTheCutNamesTheMismatch) {
  rewrite(bytes_.substr(0, shard_.offsets[2]));
  RecordIndex index;
  index.shards.push_back(shard_);
  RecordTable table(index);
  EXPECT_EQ(table.read(1), std::string(20, 'x'));
  try {
    table.read(2);
    FAIL() << "no error";
  } catch (const BadRecord& e) {
    EXPECT_EQ(e.problem(), Problem::kIndexMismatch);
    EXPECT_EQ(e.record(), 2u);
    EXPECT_THAT(e.what(), HasSubstr("the file ends before this record"));
  }
}

}  // namespace
}  // namespace lockstep::data
