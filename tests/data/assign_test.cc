#include "lockstep/data/assign.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "lockstep/base/error.h"

namespace lockstep::data {
namespace {

using Records = std::vector<std::pair<uint32_t, uint64_t>>;

Records expand(const std::vector<Segment>& segments) {
  Records out;
  for (const auto& s : segments)
    for (uint64_t r = 0; r < s.count; ++r) out.emplace_back(s.shard, s.first + r);
  return out;
}

Records plan(const std::vector<uint64_t>& shards, Assignment a, Remainder rem, int rank, int world,
             uint64_t epoch = 0, uint64_t block = 2) {
  return expand(plan_epoch(shards, {a, rem, /*seed=*/7, epoch, rank, world, block}));
}

struct Case {
  std::vector<uint64_t> shards;
  int world;
};

// Awkward sizes: a remainder, more ranks than records, nothing at all.
const Case kCases[] = {{{4, 3, 3}, 3}, {{10}, 3}, {{1}, 4}, {{}, 2}, {{0, 0}, 3}, {{5, 0, 2}, 2}};

TEST(PlanEpoch, EveryRankGetsTheSameCountInBothSchemes) {
  for (const Case& c : kCases) {
    uint64_t total = 0;
    for (uint64_t n : c.shards) total += n;
    for (Assignment a : {Assignment::kPartition, Assignment::kSample}) {
      for (Remainder rem : {Remainder::kPad, Remainder::kDrop}) {
        uint64_t expected = records_per_rank(total, c.world, rem);
        for (int rank = 0; rank < c.world; ++rank)
          EXPECT_EQ(plan(c.shards, a, rem, rank, c.world).size(), expected)
              << "total " << total << " world " << c.world << " rank " << rank;
      }
    }
  }
  EXPECT_EQ(records_per_rank(10, 3, Remainder::kPad), 4u);
  EXPECT_EQ(records_per_rank(10, 3, Remainder::kDrop), 3u);
  EXPECT_EQ(records_per_rank(1, 4, Remainder::kPad), 1u);
  EXPECT_EQ(records_per_rank(1, 4, Remainder::kDrop), 0u);
  EXPECT_EQ(records_per_rank(0, 2, Remainder::kPad), 0u);
}

TEST(PlanEpoch, PartitionWithPadCoversEverythingAndDropIsDisjoint) {
  for (uint64_t block : {1, 2, 3, 256}) {
    std::vector<uint64_t> shards{4, 3, 3};
    std::map<std::pair<uint32_t, uint64_t>, int> seen_pad, seen_drop;
    for (int rank = 0; rank < 3; ++rank) {
      for (auto r : expand(
               plan_epoch(shards, {Assignment::kPartition, Remainder::kPad, 7, 1, rank, 3, block})))
        ++seen_pad[r];
      for (auto r : expand(plan_epoch(
               shards, {Assignment::kPartition, Remainder::kDrop, 7, 1, rank, 3, block})))
        ++seen_drop[r];
    }
    EXPECT_EQ(seen_pad.size(), 10u) << "block " << block;  // 12 slots: 2 records twice
    EXPECT_EQ(seen_drop.size(), 9u) << "block " << block;  // one record left out
    for (auto& [record, times] : seen_drop) EXPECT_EQ(times, 1);
  }
}

TEST(PlanEpoch, OneRecordOnFourRanksIsPaddedByWrapping) {
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(plan({1}, Assignment::kPartition, Remainder::kPad, rank, 4), (Records{{0, 0}}));
}

TEST(PlanEpoch, SameSeedAndEpochGiveSameOrderOtherEpochAnother) {
  std::vector<uint64_t> shards{100, 100, 57};
  auto a = plan(shards, Assignment::kPartition, Remainder::kPad, 1, 2, 3);
  EXPECT_EQ(a, plan(shards, Assignment::kPartition, Remainder::kPad, 1, 2, 3));
  EXPECT_NE(a, plan(shards, Assignment::kPartition, Remainder::kPad, 1, 2, 4));
}

TEST(PlanEpoch, SampleSchemeUsesAPerRankOrder) {
  std::vector<uint64_t> shards{100, 100};
  auto r0 = plan(shards, Assignment::kSample, Remainder::kPad, 0, 2);
  auto r1 = plan(shards, Assignment::kSample, Remainder::kPad, 1, 2);
  EXPECT_NE(r0, r1);
  EXPECT_EQ(std::set(r0.begin(), r0.end()).size(), r0.size());  // no repeats within a rank
}

TEST(PlanEpoch, RejectsBadRank) {
  EXPECT_THROW(plan_epoch({1}, {Assignment::kPartition, Remainder::kPad, 0, 0, 2, 2, 1}),
               InvalidArgument);
}

}  // namespace
}  // namespace lockstep::data
