// One test per corruption kind, modelled on LevelDB's db/log_test.cc: write
// good records, damage the file, check the error names file, record and
// offset, and that the skip policy counts instead of throwing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "lockstep/data/record_io.h"
#include "test_util.h"

namespace lockstep::data {
namespace {

using ::testing::HasSubstr;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

// Three records of 10, 20 and 30 bytes: offsets 0, 26, 62; file size 108.
constexpr uint64_t kOffsets[] = {0, 26, 62};
constexpr uint64_t kFileSize = 108;

class Corruption : public ::testing::Test {
 protected:
  void SetUp() override {
    RecordWriter writer(path_);
    for (size_t n : {10, 20, 30}) writer.write(std::string(n, static_cast<char>('a' + n / 10)));
    writer.close();
    bytes_ = read_file(path_);
    ASSERT_EQ(bytes_.size(), kFileSize);
  }
  void flip(size_t at) {
    bytes_[at] ^= 0x40;
    write_file(path_, bytes_);
  }
  void truncate(size_t size) {
    bytes_.resize(size);
    write_file(path_, bytes_);
  }
  // Reads everything, expecting BadRecord; returns it.
  BadRecord read_expecting_error(int* good_records) {
    RecordReader reader(path_);
    std::string payload;
    *good_records = 0;
    try {
      while (reader.next(&payload)) ++*good_records;
    } catch (const BadRecord& e) {
      return e;
    }
    ADD_FAILURE() << "no BadRecord thrown";
    return BadRecord(Problem::kNone, "", 0, 0, "");
  }
  void expect_error(Problem problem, uint64_t record, int good_before) {
    int good = 0;
    BadRecord e = read_expecting_error(&good);
    EXPECT_EQ(e.problem(), problem);
    EXPECT_EQ(e.record(), record);
    EXPECT_EQ(e.offset(), kOffsets[record]);
    EXPECT_EQ(e.file(), path_);
    EXPECT_EQ(good, good_before);
    EXPECT_THAT(e.what(), HasSubstr(path_));
    EXPECT_THAT(e.what(), HasSubstr("record " + std::to_string(record)));
    EXPECT_THAT(e.what(), HasSubstr("byte offset " + std::to_string(kOffsets[record])));
    EXPECT_THAT(e.what(), HasSubstr(std::string(problem_name(problem))));
  }
  // Reads with the skip policy; returns the good payloads.
  std::vector<std::string> read_skipping(uint64_t* skipped) {
    RecordReader reader(path_, BadDataPolicy::kSkip);
    std::vector<std::string> out;
    std::string payload;
    while (reader.next(&payload)) out.push_back(payload);
    *skipped = reader.skipped();
    return out;
  }

  TempDir dir_;
  std::string path_ = dir_ / "three.tfrecord";
  std::string bytes_;
};

TEST_F(Corruption, FlippedPayloadByte) {
  flip(kOffsets[1] + 12 + 5);
  expect_error(Problem::kPayloadCrc, 1, 1);
  uint64_t skipped = 0;
  auto good = read_skipping(&skipped);
  EXPECT_EQ(skipped, 1u);
  ASSERT_EQ(good.size(), 2u);  // the intact length lets the reader find record 2
  EXPECT_EQ(good[1], std::string(30, 'd'));
}

TEST_F(Corruption, FlippedPayloadCrcByte) {
  flip(kOffsets[2] + 12 + 30 + 1);
  expect_error(Problem::kPayloadCrc, 2, 2);
}

TEST_F(Corruption, FlippedLengthByte) {
  flip(kOffsets[1] + 0);
  expect_error(Problem::kLengthCrc, 1, 1);
  uint64_t skipped = 0;
  EXPECT_EQ(read_skipping(&skipped).size(), 1u);  // the rest of the file is unreachable
  EXPECT_EQ(skipped, 1u);
}

TEST_F(Corruption, FlippedLengthCrcByte) {
  flip(kOffsets[0] + 9);
  expect_error(Problem::kLengthCrc, 0, 0);
}

TEST_F(Corruption, TruncatedMidPayload) {
  truncate(kOffsets[2] + 12 + 7);
  expect_error(Problem::kTruncatedPayload, 2, 2);
  uint64_t skipped = 0;
  EXPECT_EQ(read_skipping(&skipped).size(), 2u);
  EXPECT_EQ(skipped, 1u);
}

TEST_F(Corruption, TruncatedMidFooter) {
  truncate(kFileSize - 2);
  expect_error(Problem::kTruncatedPayload, 2, 2);
}

TEST_F(Corruption, TruncatedMidHeader) {
  truncate(kOffsets[2] + 5);
  expect_error(Problem::kTruncatedHeader, 2, 2);
  uint64_t skipped = 0;
  EXPECT_EQ(read_skipping(&skipped).size(), 2u);
  EXPECT_EQ(skipped, 1u);
}

TEST_F(Corruption, ParseFrameReportsEachProblemOnBuffers) {
  auto span = [&](size_t from, size_t to) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes_.data()) + from,
                                    to - from);
  };
  EXPECT_EQ(parse_frame(span(0, kFileSize)).problem, Problem::kNone);
  EXPECT_EQ(parse_frame(span(0, kFileSize)).size, kOffsets[1]);
  EXPECT_EQ(parse_frame(span(0, 11)).problem, Problem::kTruncatedHeader);
  EXPECT_EQ(parse_frame(span(0, 25)).problem, Problem::kTruncatedPayload);
  EXPECT_EQ(parse_frame(span(1, kFileSize)).problem, Problem::kLengthCrc);
}

}  // namespace
}  // namespace lockstep::data
