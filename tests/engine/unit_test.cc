// Single-process tests of the engine's building blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/autotune.h"
#include "engine/collective_traits.h"
#include "engine/announcement_table.h"
#include "engine/fusion.h"
#include "engine/ready_item.h"
#include "engine/request.h"
#include "engine/response_cache.h"
#include "engine/scaling.h"
#include "engine/stall_inspector.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/comm/half.h"
#include "lockstep/engine/engine.h"

namespace lockstep::engine::detail {
namespace {

Request allreduce(std::string name, Shape shape, DataType dtype = DataType::kFloat32) {
  Request r;
  r.name = std::move(name);
  r.shape = std::move(shape);
  r.dtype = dtype;
  return r;
}

// Issue 14.5/15.9: EngineConfig restated the knob defaults and its stall
// timeout said 60 s where the knob says 300 s.
TEST(EngineConfig, DefaultsAreTheKnobTablesInAnEmptyEnvironment) {
  for (const Knob& k : all_knobs()) unsetenv(std::string(k.name).c_str());
  EngineConfig defaults;
  EXPECT_TRUE(defaults == EngineConfig::from_knobs());
  EXPECT_EQ(defaults.stall_timeout_s, knob_double("LOCKSTEP_STALL_TIMEOUT"));
  setenv("LOCKSTEP_STALL_TIMEOUT", "7", 1);
  EXPECT_EQ(EngineConfig::from_knobs().stall_timeout_s, 7);
  EXPECT_EQ(EngineConfig{}.stall_timeout_s, defaults.stall_timeout_s);
  unsetenv("LOCKSTEP_STALL_TIMEOUT");
}

TEST(CollectiveTraits, OneSpellingAndOneRowPerCollective) {
  EXPECT_EQ(collective_name(Collective::kReduceScatter), "reduce_scatter");
  EXPECT_TRUE(traits(Collective::kAllreduce).fusible);
  EXPECT_FALSE(traits(Collective::kReduceScatter).fusible);
  EXPECT_TRUE(traits(Collective::kAllgather).first_dim_varies);
  EXPECT_FALSE(traits(Collective::kJoin).cacheable);
  EXPECT_THROW(traits(static_cast<Collective>(99)), InvalidArgument);
}

TEST(Request, SerializationRoundTrips) {
  Request r = allreduce("layer.weight", {3, 4}, DataType::kBFloat16);
  r.collective = Collective::kAlltoall;
  r.op = ReduceOp::kMax;
  r.root = 2;
  r.prescale = 0.5;
  r.postscale = 3;
  r.splits = {1, 2};
  r.ranks = {0, 3};
  r.memory = comm::MemoryKind::kCuda;  // where the buffers live travels too
  std::vector<uint8_t> bytes;
  serialize(r, bytes);
  serialize(allreduce("b", {}), bytes);
  const uint8_t* p = bytes.data();
  EXPECT_EQ(deserialize(p, bytes.data() + bytes.size()), r);
  EXPECT_EQ(deserialize(p, bytes.data() + bytes.size()).name, "b");
  EXPECT_EQ(p, bytes.data() + bytes.size());
  const uint8_t* q = bytes.data();
  EXPECT_THROW(deserialize(q, bytes.data() + 5), Error);
}

TEST(ReadyItem, MismatchNamesTensorFieldAndRanks) {
  std::vector<std::optional<Request>> per_rank = {allreduce("fc.weight", {10, 128}),
                                                  allreduce("fc.weight", {10, 64}),
                                                  allreduce("fc.weight", {10, 128})};
  std::vector<int> ranks = {0, 1, 2};
  ReadyItem item = make_ready_item(per_rank, {0, 0, 0}, ranks);
  EXPECT_EQ(item.error_kind, ItemError::kMismatch);
  EXPECT_EQ(item.error, "allreduce 'fc.weight': shape [10,128] on ranks 0,2 but [10,64] on rank 1");
}

TEST(ReadyItem, AllgatherFirstDimensionMayDiffer) {
  Request a = allreduce("g", {2, 3}), b = allreduce("g", {5, 3});
  a.collective = b.collective = Collective::kAllgather;
  std::vector<int> ranks = {0, 1};
  EXPECT_EQ(make_ready_item({a, b}, {0, 0}, ranks).error_kind, ItemError::kNone);
  b.shape = {5, 4};
  EXPECT_EQ(make_ready_item({a, b}, {0, 0}, ranks).error_kind, ItemError::kMismatch);
}

TEST(ReadyItem, JoinedRootIsAnError) {
  Request a = allreduce("w", {2});
  a.collective = Collective::kBroadcast;
  a.root = 1;
  std::vector<int> ranks = {0, 1};
  ReadyItem item = make_ready_item({a, std::nullopt}, {0, 1}, ranks);
  EXPECT_EQ(item.error_kind, ItemError::kJoin);
  EXPECT_NE(item.error.find("root"), std::string::npos);
}

TEST(ResponseCache, ReusesLowestFreeSlotAndEvictsLeastRecentlyUsed) {
  ResponseCache cache(2);
  EXPECT_EQ(cache.insert({allreduce("a", {1})}, 1), 0u);
  EXPECT_EQ(cache.insert({allreduce("b", {1})}, 2), 1u);
  cache.touch(0, 3);
  EXPECT_EQ(cache.insert({allreduce("c", {1})}, 4), 1u);  // evicts b
  EXPECT_FALSE(cache.find("b"));
  EXPECT_EQ(*cache.find("a"), 0u);
  cache.erase(1);
  EXPECT_EQ(cache.num_slots(), 1u);
}

TEST(AnnouncementTable, CompletesWhenEveryNonJoinedRankAnnounced) {
  AnnouncementTable table(3);
  table.add(0, allreduce("x", {1}));
  table.add(2, allreduce("y", {1}));
  table.add(2, allreduce("x", {1}));
  EXPECT_TRUE(table.take_complete({0, 0, 0}).empty());
  auto done = table.take_complete({0, 1, 0});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].name, "x");
  EXPECT_EQ(table.entries().size(), 1u);
}

TEST(Fusion, PacksSameKeyUpToThresholdInOrder) {
  std::vector<ReadyItem> ready;
  auto add = [&](Shape s, DataType d) {
    ReadyItem item;
    item.request = allreduce("t" + std::to_string(ready.size()), s, d);
    ready.push_back(item);
  };
  add({10}, DataType::kFloat32);   // 40 B
  add({10}, DataType::kFloat64);   // 80 B
  add({10}, DataType::kFloat32);   // 40 B
  add({300}, DataType::kFloat32);  // 1200 B > threshold
  add({5}, DataType::kFloat32);    // 20 B
  auto batches = plan_batches(ready, 1000);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].items, (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(batches[0].bytes, 100u);
  EXPECT_EQ(batches[1].items, (std::vector<size_t>{1}));
  EXPECT_EQ(batches[2].items, (std::vector<size_t>{3}));
  EXPECT_EQ(plan_batches(ready, 0).size(), 5u);
}

// Fusing a tensor copies it twice; above threshold / 8 that costs more than
// the collective it saves, so it runs alone even where it would fit.
TEST(Fusion, TensorAboveAnEighthOfTheThresholdRunsAlone) {
  std::vector<ReadyItem> ready;
  auto add = [&](int64_t elements) {
    ReadyItem item;
    item.request = allreduce("t" + std::to_string(ready.size()), {elements}, DataType::kFloat32);
    ready.push_back(item);
  };
  add(8);   // 32 B
  add(33);  // 132 B > 1024 / 8
  add(32);  // 128 B: the largest that fuses
  add(40);  // 160 B, first in its batch: still alone
  add(8);   // 32 B
  ASSERT_EQ(largest_fused_tensor(1024), 128u);
  auto batches = plan_batches(ready, 1024);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].items, (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(batches[0].bytes, 192u);
  EXPECT_EQ(batches[1].items, (std::vector<size_t>{1}));
  EXPECT_EQ(batches[1].bytes, 132u);
  EXPECT_EQ(batches[2].items, (std::vector<size_t>{3}));
}

TEST(Scaling, NeutralValuesAreIdentities) {
  float f[2];
  fill_neutral(f, 2, DataType::kFloat32, ReduceOp::kMin);
  EXPECT_TRUE(std::isinf(f[0]) && f[0] > 0);
  fill_neutral(f, 2, DataType::kFloat32, ReduceOp::kProduct);
  EXPECT_EQ(f[1], 1.0f);
  int32_t i[1];
  fill_neutral(i, 1, DataType::kInt32, ReduceOp::kMax);
  EXPECT_EQ(i[0], INT32_MIN);
  uint16_t h[1];
  fill_neutral(h, 1, DataType::kBFloat16, ReduceOp::kProduct);
  EXPECT_EQ(comm::bf16_to_float(h[0]), 1.0f);
}

TEST(Scaling, AverageAndScaleFactors) {
  float f[2] = {6, 9};
  finish_reduction(f, 2, DataType::kFloat32, ReduceOp::kAverage, 2.0, 3);
  EXPECT_FLOAT_EQ(f[0], 4);
  EXPECT_FLOAT_EQ(f[1], 6);
  int64_t i[2] = {7, -7};
  finish_reduction(i, 2, DataType::kInt64, ReduceOp::kAverage, 1.0, 2);
  EXPECT_EQ(i[0], 3);
  EXPECT_EQ(i[1], -3);
  float src[2] = {1, 2}, dst[2];
  copy_scaled(src, dst, 2, DataType::kFloat32, 0.5);
  EXPECT_EQ(dst[1], 1.0f);
}

TEST(StallInspector, ReportsThenAbortsOnlyOnRankZerosClock) {
  StallInspector inspector(1.0, 3.0);
  CycleResult r;
  r.joined = {0, 0};
  r.partial.push_back({"w", Collective::kAllreduce, {0}});
  auto t0 = StallInspector::Clock::now();
  EXPECT_EQ(inspector.observe(r, t0), StallAction::kNone);
  EXPECT_EQ(inspector.observe(r, t0 + std::chrono::milliseconds(1100)), StallAction::kReport);
  EXPECT_EQ(inspector.observe(r, t0 + std::chrono::milliseconds(1200)), StallAction::kNone);
  r.stall_report = true;
  r.stall_action = StallAction::kReport;
  EXPECT_EQ(inspector.observe(r, t0 + std::chrono::milliseconds(1300)), StallAction::kNone);
  r.stall_report = false;
  EXPECT_EQ(inspector.observe(r, t0 + std::chrono::milliseconds(3100)), StallAction::kAbort);
  std::vector<int> ranks = {0, 1};
  EXPECT_EQ(describe_stall(r, ranks), "allreduce 'w' submitted by rank 0 but not by rank 1");
}

// The smallest group of names leads; at most 8 names in all, every group at least one.
TEST(StallInspector, DescribeLeadsWithTheOddOneOut) {
  CycleResult r;
  r.joined = {0, 0, 0};
  for (int i = 0; i < 10; ++i)
    r.partial.push_back({"g" + std::to_string(i), Collective::kAllreduce, {1, 2}});
  r.partial.push_back({"avg_loss", Collective::kAllreduce, {0}});
  std::vector<int> ranks = {0, 1, 2};
  EXPECT_EQ(describe_stall(r, ranks),
            "allreduce 'avg_loss' submitted by rank 0 but not by ranks 1,2; allreduce 'g0', "
            "allreduce 'g1', allreduce 'g2', allreduce 'g3', allreduce 'g4', allreduce 'g5', "
            "allreduce 'g6' and 3 more submitted by ranks 1,2 but not by rank 0");
  std::string deadlock = describe_stall(r, ranks, /*deadlock=*/true);
  EXPECT_TRUE(
      deadlock.starts_with("rank 0 waits in allreduce 'avg_loss', which ranks 1,2 never "
                           "submitted; ranks 1,2 wait in one of allreduce 'g0', "))
      << deadlock;
}

TEST(Autotuner, ConvergesToOneOfItsCandidates) {
  Autotuner tuner(64 << 20, 2);
  int cycles = 0;
  while (!tuner.converged() && cycles < 100) {
    // Pretend 16 MiB is fastest.
    double seconds = tuner.threshold() == (16u << 20) ? 0.001 : 0.01;
    tuner.record(1 << 20, seconds);
    ++cycles;
  }
  EXPECT_TRUE(tuner.converged());
  EXPECT_EQ(tuner.threshold(), 16u << 20);
}

}  // namespace
}  // namespace lockstep::engine::detail
