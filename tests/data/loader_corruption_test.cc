// Each corruption kind through the loader: by default the consumer gets a
// BadRecord naming file, record and offset; with kSkip the epoch completes,
// the record is counted, and the batch count is unchanged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "lockstep/data/example.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/record_io.h"
#include "lockstep/data/shard_writer.h"
#include "test_util.h"

namespace lockstep::data {
namespace {

using ::testing::HasSubstr;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

constexpr int kRecords = 12;
constexpr int kBad = 7;  // the damaged record (the last one for truncations)

std::string good_record(int64_t id) {
  Example e;
  e.set_bytes("image", std::string(4, static_cast<char>(id)))
      .set_int64s("label", {id})
      .set_int64s("shape", {2, 2})
      .set_bytes("format", "raw");
  return serialize_example(e);
}

struct Damage {
  const char* name;
  Problem problem;
  int record;
  std::function<std::string(int)> payload;                     // replaces record kBad's payload
  std::function<void(std::string&, const ShardInfo&)> damage;  // edits the file bytes
};

const Damage kDamages[] = {
    {"payload byte", Problem::kPayloadCrc, kBad, nullptr,
     [](std::string& b, const ShardInfo& s) { b[s.offsets[kBad] + 12 + 3] ^= 1; }},
    {"length byte", Problem::kLengthCrc, kBad, nullptr,
     [](std::string& b, const ShardInfo& s) { b[s.offsets[kBad] + 2] ^= 1; }},
    {"mid-payload truncation", Problem::kTruncatedPayload, kRecords - 1, nullptr,
     [](std::string& b, const ShardInfo& s) { b.resize(s.offsets.back() + 12 + 3); }},
    {"mid-header truncation", Problem::kTruncatedHeader, kRecords - 1, nullptr,
     [](std::string& b, const ShardInfo& s) { b.resize(s.offsets.back() + 5); }},
    // The bug behind a silent 53,636-of-60,000 epoch: a cut at a record boundary.
    {"cut at a record boundary", Problem::kIndexMismatch, kRecords - 1, nullptr,
     [](std::string& b, const ShardInfo& s) { b.resize(s.offsets.back()); }},
    {"garbage protobuf", Problem::kBadExample, kBad,
     [](int) { return std::string("\xff\xff\xff\xff not a proto"); }, nullptr},
    {"undecodable jpeg", Problem::kUndecodable, kBad,
     [](int id) {
       Example e;
       e.set_bytes("image", "\xff\xd8\xff garbage")
           .set_int64s("label", {id})
           .set_bytes("format", "jpeg");
       return serialize_example(e);
     },
     nullptr},
};

class LoaderCorruption : public ::testing::TestWithParam<Damage> {
 protected:
  void SetUp() override {
    const Damage& d = GetParam();
    ShardSetWriter writer(dir_.str(), "bad", 1);
    for (int i = 0; i < kRecords; ++i)
      writer.add(d.payload && i == kBad ? d.payload(i) : good_record(i));
    shard_ = writer.finish().shards[0];
    if (d.damage) {
      std::string bytes = read_file(shard_.path);
      d.damage(bytes, shard_);
      write_file(shard_.path, bytes);
    }
    options_.index_path = writer.index_path();
    options_.batch_size = 5;
    options_.threads = 2;
  }
  TempDir dir_;
  ShardInfo shard_;
  LoaderOptions options_;
};

TEST_P(LoaderCorruption, ThrowsNamingFileRecordAndOffset) {
  const Damage& d = GetParam();
  Loader p(options_);
  p.start_epoch(0);
  try {
    while (p.next()) {
    }
    FAIL() << "no error for " << d.name;
  } catch (const BadRecord& e) {
    EXPECT_EQ(e.problem(), d.problem) << e.what();
    EXPECT_EQ(e.file(), shard_.path);
    EXPECT_EQ(e.record(), uint64_t(d.record));
    EXPECT_EQ(e.offset(), shard_.offsets[d.record]);
    EXPECT_THAT(e.what(), HasSubstr(shard_.path));
    EXPECT_THAT(e.what(), HasSubstr("record " + std::to_string(d.record) + " at byte offset " +
                                    std::to_string(shard_.offsets[d.record])));
  }
  EXPECT_THROW(p.next(), BadRecord);  // the epoch stays failed
}

TEST_P(LoaderCorruption, SkipPolicyCountsAndKeepsBatchCount) {
  const Damage& d = GetParam();
  options_.bad_data = BadDataPolicy::kSkip;
  Loader p(options_);
  p.start_epoch(0);
  size_t records = 0, batches = 0;
  while (auto batch = p.next()) {
    records += batch->size();
    ++batches;
    for (int64_t label : batch->labels) EXPECT_NE(label, d.record);
  }
  EXPECT_EQ(batches, 3u);  // ceil(12 / 5), as without damage
  EXPECT_EQ(records, size_t(kRecords - 1));
  SkipReport report = p.skip_report();
  EXPECT_EQ(report.skipped, 1u);
  ASSERT_EQ(report.first_reasons.size(), 1u);
  EXPECT_THAT(report.first_reasons[0], HasSubstr(std::string(problem_name(d.problem))));
  EXPECT_THAT(report.first_reasons[0], HasSubstr("record " + std::to_string(d.record)));
}

// The bug: bytes after a shard's last indexed record trained with rc 0 and no
// word, since readers follow the index and never looked past it. Whatever the
// tail (random garbage of 1 to 2000 bytes, or a valid record written after
// indexing) and whatever the policy, opening the shard set names the file and
// the offset where its index ends.
TEST(LoaderTail, BytesAfterTheLastIndexedRecordAreRefused) {
  TempDir dir;
  ShardSetWriter writer(dir.str(), "tail", 1);
  for (int i = 0; i < kRecords; ++i) writer.add(good_record(i));
  const ShardInfo shard = writer.finish().shards[0];
  const std::string intact = read_file(shard.path);
  std::mt19937 rng(30);
  std::vector<std::string> tails;
  for (size_t n : {1, 2, 11, 12, 13, 16, 100, 1999, 2000}) tails.emplace_back(n, '\0');
  for (int i = 0; i < 8; ++i) tails.emplace_back(1 + rng() % 2000, '\0');
  for (std::string& tail : tails)
    for (char& c : tail) c = static_cast<char>(rng());
  std::string record_after_index;
  append_frame(record_after_index, good_record(kRecords));
  tails.push_back(record_after_index);
  for (const std::string& tail : tails) {
    write_file(shard.path, intact + tail);
    for (BadDataPolicy policy : {BadDataPolicy::kThrow, BadDataPolicy::kSkip}) {
      LoaderOptions options;
      options.index_path = writer.index_path();
      options.batch_size = 5;
      options.bad_data = policy;
      try {
        Loader p(options);
        p.start_epoch(0);
        while (p.next()) {
        }
        ADD_FAILURE() << "a tail of " << tail.size() << " bytes was read silently";
      } catch (const BadRecord& e) {
        EXPECT_EQ(e.problem(), Problem::kIndexMismatch) << e.what();
        EXPECT_EQ(e.file(), shard.path);
        EXPECT_EQ(e.offset(), shard.bytes);
        EXPECT_THAT(e.what(), HasSubstr(std::to_string(tail.size()) + " bytes after the last "
                                                                      "indexed record"));
      }
    }
  }
  write_file(shard.path, intact);
  LoaderOptions options;
  options.index_path = writer.index_path();
  options.batch_size = 5;
  Loader intact_loader(options);
  intact_loader.start_epoch(0);
  size_t batches = 0;
  while (intact_loader.next()) ++batches;
  EXPECT_EQ(batches, 3u);
}

INSTANTIATE_TEST_SUITE_P(Kinds, LoaderCorruption, ::testing::ValuesIn(kDamages),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace lockstep::data
