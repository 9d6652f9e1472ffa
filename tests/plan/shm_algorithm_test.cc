// The shm transport's algorithm decision (plan/shm_algorithm.h), which the
// planner's algorithm_for calls too (Note [One decision]).
#include <gtest/gtest.h>

#include "lockstep/base/error.h"
#include "lockstep/plan/cost.h"
#include "lockstep/policy/shm_algorithm.h"

namespace lockstep::plan {
namespace {

using namespace lockstep::policy;  // the decisions under test

constexpr int64_t KiB = 1024, MiB = 1024 * 1024;

ShmAlgorithm algo(const ShmPolicy& p, int n, int64_t bytes) {
  return shm_allreduce_choice(p, n, bytes, 4).algorithm;
}

// The cut-off is on what a rank reads from its peers, (n-1)B, so at 2 ranks
// it is LOCKSTEP_SHM_SMALL_BYTES (as before issue 28) and falls with n.
TEST(ShmAlgorithm, OneStepWhileThePeerBytesStayUnderSmallBytes) {
  ShmPolicy p;  // 16 KiB
  EXPECT_EQ(algo(p, 2, 16 * KiB), ShmAlgorithm::kOneStep);
  EXPECT_EQ(algo(p, 2, 16 * KiB + 4), ShmAlgorithm::kTwoStep);
  EXPECT_EQ(algo(p, 5, 4 * KiB), ShmAlgorithm::kOneStep);  // reads 16 KiB
  EXPECT_EQ(algo(p, 5, 4 * KiB + 4), ShmAlgorithm::kTwoStep);
  EXPECT_EQ(algo(p, 16, 1 * KiB), ShmAlgorithm::kOneStep);  // reads 15 KiB
  EXPECT_EQ(algo(p, 16, 4 * KiB), ShmAlgorithm::kTwoStep);  // issue 28: was one_step
  EXPECT_EQ(algo(p, 16, 0), ShmAlgorithm::kOneStep);
}

TEST(ShmAlgorithm, LegacyKeepsTheFixedCutOffSlotChunksAndLinearWaits) {
  ShmPolicy p;
  p.algorithm = "legacy";
  ShmChoice c = shm_allreduce_choice(p, 16, 16 * KiB, 4);
  EXPECT_EQ(c.algorithm, ShmAlgorithm::kOneStep);
  EXPECT_EQ(c.sync, ShmSync::kLinear);
  c = shm_allreduce_choice(p, 16, 64 * KiB, 4);
  EXPECT_EQ(c.algorithm, ShmAlgorithm::kTwoStep);
  EXPECT_EQ(c.chunk_bytes, MiB);
  EXPECT_FALSE(c.pipelined);
  EXPECT_EQ(c.name(), "two_step/1MiB+2steps");
}

TEST(ShmAlgorithm, ForcedAlgorithmsAndTheSlotBound) {
  ShmPolicy p;
  p.algorithm = "two_step";
  EXPECT_EQ(algo(p, 2, 4), ShmAlgorithm::kTwoStep);
  p.algorithm = "one_step";
  EXPECT_EQ(algo(p, 16, MiB), ShmAlgorithm::kOneStep);
  EXPECT_EQ(algo(p, 16, MiB + 4), ShmAlgorithm::kTwoStep);  // does not fit one slot
}

TEST(ShmAlgorithm, ChunkIsCacheSizedAndWholeElements) {
  ShmPolicy p;
  EXPECT_EQ(shm_chunk_bytes(p, 2), 512 * KiB);  // half a slot: three rotate in two
  EXPECT_EQ(shm_chunk_bytes(p, 8), 512 * KiB);  // 4 MiB in flight
  EXPECT_EQ(shm_chunk_bytes(p, 16), 256 * KiB);
  EXPECT_EQ(shm_chunk_bytes(p, 128), 64 * KiB);  // floor
  p.chunk_bytes = 8 * KiB;
  EXPECT_EQ(shm_chunk_bytes(p, 2), 8 * KiB);
  EXPECT_EQ(shm_allreduce_choice(p, 3, MiB, 12).chunk_bytes, 8184);  // 682 elements of 12
  EXPECT_EQ(shm_allreduce_choice(p, 16, MiB, 4).name(), "two_step/8KiB+dissemination");
}

TEST(ShmAlgorithm, DisseminationFromFiveRanksWithACoreEachUnlessPinned) {
  ShmPolicy p;
  EXPECT_EQ(shm_sync_for(p, 4), ShmSync::kLinear);
  EXPECT_EQ(shm_sync_for(p, 5), ShmSync::kDissemination);
  p.host_cores = 4;  // oversubscribed: a round may wait for a peer's time slice
  EXPECT_EQ(shm_sync_for(p, 5), ShmSync::kLinear);
  p.host_cores = 16;
  EXPECT_EQ(shm_sync_for(p, 16), ShmSync::kDissemination);
  p.sync = "linear";
  EXPECT_EQ(shm_sync_for(p, 16), ShmSync::kLinear);
  p.sync = "dissemination";
  EXPECT_EQ(shm_sync_for(p, 3), ShmSync::kDissemination);
}

// Per rank: one_step stages B and reads every peer's B; two_step stages and
// reduces B in all, reads n-1 peers' copies of its share and the n-1 other
// reduced shares.
TEST(ShmAlgorithm, SegmentBytesClosedForms) {
  SegmentBytes one = shm_allreduce_bytes(ShmAlgorithm::kOneStep, 4, 1000);
  EXPECT_DOUBLE_EQ(one.read, 3000);
  EXPECT_DOUBLE_EQ(one.written, 1000);
  SegmentBytes two = shm_allreduce_bytes(ShmAlgorithm::kTwoStep, 4, 1000);
  EXPECT_DOUBLE_EQ(two.read, 1500);
  EXPECT_DOUBLE_EQ(two.written, 1000);
  SegmentBytes leaf = shm_allreduce_bytes(ShmAlgorithm::kTwoStep, 4, 1000, false);
  EXPECT_DOUBLE_EQ(leaf.read, 750);
  EXPECT_DOUBLE_EQ(shm_broadcast_bytes(4, true, 1000).written, 1000);
  EXPECT_DOUBLE_EQ(shm_broadcast_bytes(4, false, 1000).read, 1000);
  EXPECT_DOUBLE_EQ(shm_allreduce_bytes(ShmAlgorithm::kTwoStep, 1, 1000).read, 0);
}

// The planner names what the transport would run: the same function with
// the model's knobs (the runtime side: tests/comm/shm_algorithms_test.cc).
TEST(ShmAlgorithm, PlannerAsksTheSameDecision) {
  NetworkModel m;
  m.shm_small_bytes = 16 * KiB;
  m.shm_slot_bytes = MiB;
  ShmPolicy p;
  for (int n : {2, 3, 5, 8, 16})
    for (int64_t b : {int64_t{4}, KiB, 4 * KiB, 16 * KiB, 64 * KiB, 4 * MiB})
      EXPECT_EQ(algorithm_for(m, "shm", n, double(b)), algorithm_name(algo(p, n, b)))
          << n << " ranks, " << b << " bytes";
  // Steps: one per chunk of the transport's chunk (256 KiB), one to drain.
  EXPECT_DOUBLE_EQ(coefficients(m, "shm", "two_step", 16, 4.0 * MiB).steps, 16 + 1);
}

// Node groups turn the two_step side into two_level; one_step, forced
// two_step, legacy and groupings that do not split the ranks stay flat.
TEST(ShmAlgorithm, TwoLevelWhereRanksFormNodeGroups) {
  ShmPolicy p;
  p.nodes = 2;
  EXPECT_EQ(algo(p, 8, 1 * KiB), ShmAlgorithm::kOneStep);
  const ShmChoice c = shm_allreduce_choice(p, 8, MiB, 4);
  EXPECT_EQ(c.algorithm, ShmAlgorithm::kTwoLevel);
  EXPECT_EQ(c.name(), "two_level/2x4/512KiB+dissemination");
  EXPECT_EQ(shm_allreduce_choice(p, 4, MiB, 4).name(), "two_level/2x2/512KiB");
  EXPECT_EQ(algo(p, 2, MiB), ShmAlgorithm::kTwoStep);  // groups of one rank
  EXPECT_EQ(algo(p, 5, MiB), ShmAlgorithm::kTwoStep);  // does not split
  p.nodes = 3;
  EXPECT_EQ(shm_node_groups(p, 8), 1);
  EXPECT_EQ(shm_node_groups(p, 6), 3);
  EXPECT_EQ(algo(p, 6, MiB), ShmAlgorithm::kTwoLevel);
  for (const char* flat : {"two_step", "legacy", "one_step"}) {
    p.algorithm = flat;
    EXPECT_EQ(algo(p, 6, 2 * MiB), ShmAlgorithm::kTwoStep) << flat;  // past a slot
  }
  p.algorithm = "two_level";  // forced: also below the one-step cut-off
  EXPECT_EQ(algo(p, 6, 64), ShmAlgorithm::kTwoLevel);
  p.nodes = 0;  // auto, before the transport resolves it
  EXPECT_EQ(algo(p, 6, MiB), ShmAlgorithm::kTwoStep);
}

// Per rank, for B = 8000 bytes on 8 ranks in 2 nodes of 4: flat two_step
// reads 2(n-1)/n B of which 2(n-L)/n B across; two_level 2(L-1)/L B locally
// plus one share of B/L across (the end nodes; a middle node two).
TEST(ShmAlgorithm, CrossNodeClosedForms) {
  const SegmentBytes flat = shm_allreduce_bytes(ShmAlgorithm::kTwoStep, 8, 8000, true, 2, 0);
  EXPECT_DOUBLE_EQ(flat.read, 7000 + 7000);
  EXPECT_DOUBLE_EQ(flat.cross_node_read, 2 * 4 * 1000);
  const SegmentBytes first = shm_allreduce_bytes(ShmAlgorithm::kTwoLevel, 8, 8000, true, 2, 0);
  EXPECT_DOUBLE_EQ(first.read, 2 * 3 * 2000 + 2000);
  EXPECT_DOUBLE_EQ(first.written, 8000 + 2000);
  EXPECT_DOUBLE_EQ(first.cross_node_read, 2000);
  const SegmentBytes last = shm_allreduce_bytes(ShmAlgorithm::kTwoLevel, 8, 8000, true, 2, 1);
  EXPECT_DOUBLE_EQ(last.written, 8000);
  EXPECT_DOUBLE_EQ(last.cross_node_read, 2000);
  const SegmentBytes middle = shm_allreduce_bytes(ShmAlgorithm::kTwoLevel, 6, 6000, true, 3, 1);
  EXPECT_DOUBLE_EQ(middle.cross_node_read, 2 * 3000);
  EXPECT_DOUBLE_EQ(shm_allreduce_bytes(ShmAlgorithm::kOneStep, 8, 100, true, 2, 0).cross_node_read,
                   400);
  EXPECT_DOUBLE_EQ(shm_allreduce_bytes(ShmAlgorithm::kTwoStep, 8, 8000).cross_node_read, 0);
}

// The planner names two_level for a model with node groups and costs it
// with two_step's fitted line (what a one-node fit measures).
TEST(ShmAlgorithm, PlannerNamesAndCostsTwoLevel) {
  NetworkModel m;
  m.shm_nodes = 2;
  EXPECT_EQ(algorithm_for(m, "shm", 8, double(MiB)), "two_level");
  EXPECT_EQ(algorithm_for(m, "shm", 8, 1024.0), "one_step");
  const Coefficients k = coefficients(m, "shm", "two_level", 8, 4.0 * MiB);
  EXPECT_DOUBLE_EQ(k.steps, 8 * (2 + 1) + 1);  // 512 KiB chunks, G + 1 steps each, 1 to drain
  EXPECT_GT(k.bytes, 0);
}

TEST(ShmAlgorithm, NodesKnob) {
  for (auto [text, nodes] : {std::pair{"auto", 0}, {"off", 1}, {"1", 1}, {"4", 4}}) {
    setenv("LOCKSTEP_SHM_NODES", text, 1);
    EXPECT_EQ(ShmPolicy::from_knobs().nodes, nodes) << text;
  }
  for (const char* bad : {"0", "two", "-2", "2x"}) {
    setenv("LOCKSTEP_SHM_NODES", bad, 1);
    try {
      ShmPolicy::from_knobs();
      ADD_FAILURE() << "expected InvalidArgument for " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("LOCKSTEP_SHM_NODES"), std::string::npos);
    }
  }
  unsetenv("LOCKSTEP_SHM_NODES");
}

TEST(ShmAlgorithm, KnobsThatDoNotParseAreNamed) {
  setenv("LOCKSTEP_SHM_CHUNK_BYTES", "1000", 1);
  try {
    ShmPolicy::from_knobs();
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_SHM_CHUNK_BYTES"), std::string::npos);
  }
  unsetenv("LOCKSTEP_SHM_CHUNK_BYTES");
  EXPECT_EQ(ShmPolicy::from_knobs().chunk_bytes, 0);
}

}  // namespace
}  // namespace lockstep::plan
