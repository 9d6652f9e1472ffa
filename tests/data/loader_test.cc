// The loader on small synthetic shards whose records carry their id as
// label, so order, coverage and determinism can be checked exactly.
#include "lockstep/data/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "lockstep/data/example.h"
#include "lockstep/data/shard_writer.h"
#include "test_util.h"

namespace lockstep::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// A 4x4 gray image whose pixels derive from the id, labelled with the id.
std::string record_for(int64_t id) {
  std::string pixels(16, '\0');
  for (int i = 0; i < 16; ++i) pixels[i] = static_cast<char>((id * 31 + i * 7) & 0xff);
  Example e;
  e.set_bytes("image", pixels)
      .set_int64s("label", {id})
      .set_int64s("shape", {4, 4})
      .set_bytes("format", "raw");
  return serialize_example(e);
}

std::string make_dataset(const TempDir& dir, int records, int shards) {
  ShardSetWriter writer(dir.str(), "ids", shards);
  for (int i = 0; i < records; ++i) writer.add(record_for(i));
  writer.finish();
  return writer.index_path();
}

LoaderOptions small_options(const std::string& index) {
  LoaderOptions o;
  o.index_path = index;
  o.batch_size = 8;
  o.block_records = 5;
  o.shuffle_buffer = 16;
  o.interleave = 3;
  o.seed = 42;
  return o;
}

struct EpochOutput {
  std::vector<int64_t> labels;
  std::vector<float> data;
  std::vector<size_t> batch_sizes;
};

EpochOutput run_epoch(Loader& p, uint64_t epoch) {
  EpochOutput out;
  p.start_epoch(epoch);
  while (auto batch = p.next()) {
    out.labels.insert(out.labels.end(), batch->labels.begin(), batch->labels.end());
    out.data.insert(out.data.end(), batch->data.begin(), batch->data.end());
    out.batch_sizes.push_back(batch->size());
  }
  return out;
}

EpochOutput run_epoch(const LoaderOptions& o, uint64_t epoch) {
  Loader p(o);
  return run_epoch(p, epoch);
}

TEST(Loader, YieldsEveryRecordOnceWithShapes) {
  TempDir dir;
  Loader p(small_options(make_dataset(dir, 103, 4)));
  p.start_epoch(0);
  std::multiset<int64_t> labels;
  uint64_t batches = 0;
  while (auto batch = p.next()) {
    EXPECT_EQ(batch->index, batches++);
    ASSERT_EQ(batch->shape, (std::vector<int64_t>{int64_t(batch->size()), 1, 4, 4}));
    EXPECT_EQ(batch->data.size(), batch->size() * 16);
    labels.insert(batch->labels.begin(), batch->labels.end());
  }
  EXPECT_EQ(batches, p.batches_per_epoch());
  EXPECT_EQ(batches, 13u);  // ceil(103 / 8)
  ASSERT_EQ(labels.size(), 103u);
  EXPECT_EQ(std::set<int64_t>(labels.begin(), labels.end()).size(), 103u);
  EXPECT_FALSE(p.next());  // stays at the end
}

TEST(Loader, SameOrderAndPixelsWithOneOrFourThreads) {
  TempDir dir;
  LoaderOptions o = small_options(make_dataset(dir, 200, 3));
  o.decode.crop_height = o.decode.crop_width = 3;  // random crop + flip exercise the seeds
  o.decode.random_flip = true;
  o.threads = 1;
  EpochOutput one = run_epoch(o, 5);
  o.threads = 4;
  o.prefetch = 2;
  EpochOutput four = run_epoch(o, 5);
  EXPECT_EQ(one.labels, four.labels);
  EXPECT_EQ(one.data, four.data);
  EXPECT_NE(one.labels, run_epoch(o, 6).labels);  // another epoch, another order
  std::vector<int64_t> sorted = one.labels;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(one.labels, sorted);  // actually shuffled
}

TEST(Loader, RanksGetEqualBatchCountsAndTogetherCoverTheData) {
  TempDir dir;
  std::string index = make_dataset(dir, 10, 2);
  for (Assignment a : {Assignment::kPartition, Assignment::kSample}) {
    std::set<int64_t> covered;
    for (int rank = 0; rank < 3; ++rank) {
      LoaderOptions o = small_options(index);
      o.assignment = a;
      o.batch_size = 3;
      o.rank = rank;
      o.world_size = 3;
      Loader p(o);
      EpochOutput out = run_epoch(p, 0);
      EXPECT_EQ(out.labels.size(), 4u);  // ceil(10 / 3), padded by wrapping
      EXPECT_EQ(out.batch_sizes, (std::vector<size_t>{3, 1}));
      EXPECT_EQ(p.batches_per_epoch(), 2u);
      covered.insert(out.labels.begin(), out.labels.end());
    }
    if (a == Assignment::kPartition) {
      EXPECT_EQ(covered.size(), 10u);
    }
  }
}

TEST(Loader, DropModesGiveFullBatchesOnly) {
  TempDir dir;
  LoaderOptions o = small_options(make_dataset(dir, 10, 2));
  o.remainder = Remainder::kDrop;
  o.world_size = 3;
  o.batch_size = 2;
  o.drop_last_batch = true;
  EpochOutput out = run_epoch(o, 0);
  EXPECT_EQ(out.batch_sizes, (std::vector<size_t>{2}));  // 3 records, one full batch
}

TEST(Loader, EmptyDataSetHasNoBatches) {
  TempDir dir;
  Loader p(small_options(make_dataset(dir, 0, 2)));
  EXPECT_EQ(p.batches_per_epoch(), 0u);
  p.start_epoch(0);
  EXPECT_FALSE(p.next());
}

TEST(Loader, CacheGivesTheSameOutput) {
  TempDir dir;
  LoaderOptions o = small_options(make_dataset(dir, 120, 3));
  EpochOutput plain = run_epoch(o, 2);
  o.cache = true;
  Loader cached(o);
  run_epoch(cached, 1);  // fills the cache
  EpochOutput from_cache = run_epoch(cached, 2);
  EXPECT_EQ(plain.labels, from_cache.labels);
  EXPECT_EQ(plain.data, from_cache.data);
}

TEST(Loader, StopsCleanlyMidEpoch) {
  TempDir dir;
  LoaderOptions o = small_options(make_dataset(dir, 500, 3));
  o.prefetch = 1;
  o.batch_size = 1;
  Loader p(o);
  p.start_epoch(0);
  ASSERT_TRUE(p.next());
  p.start_epoch(1);  // abandons epoch 0 with the producer blocked on a full queue
  ASSERT_TRUE(p.next());
}  // destructor joins a running epoch

TEST(Loader, BuilderFillsOptions) {
  LoaderBuilder b("x.index.json");
  b.rank(1, 4)
      .seed(9)
      .batch(64, true)
      .shuffle(100)
      .threads(2)
      .prefetch(3)
      .cache()
      .interleave(5)
      .assignment(Assignment::kSample, Remainder::kDrop)
      .bad_data(BadDataPolicy::kSkip);
  const LoaderOptions& o = b.options();
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.world_size, 4);
  EXPECT_EQ(o.batch_size, 64u);
  EXPECT_TRUE(o.drop_last_batch);
  EXPECT_TRUE(o.cache);
  EXPECT_EQ(o.assignment, Assignment::kSample);
  EXPECT_EQ(o.bad_data, BadDataPolicy::kSkip);
  EXPECT_THROW(b.build(), Error);  // no such index file
}

}  // namespace
}  // namespace lockstep::data
