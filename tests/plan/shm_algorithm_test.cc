// The shm transport's algorithm decision (plan/shm_algorithm.h), which the
// planner's algorithm_for calls too (Note [One decision]).
#include <gtest/gtest.h>

#include "lockstep/base/error.h"
#include "lockstep/plan/cost.h"
#include "lockstep/plan/shm_algorithm.h"

namespace lockstep::plan {
namespace {

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
  EXPECT_EQ(algo(p, 5, 4 * KiB), ShmAlgorithm::kOneStep);      // reads 16 KiB
  EXPECT_EQ(algo(p, 5, 4 * KiB + 4), ShmAlgorithm::kTwoStep);
  EXPECT_EQ(algo(p, 16, 1 * KiB), ShmAlgorithm::kOneStep);     // reads 15 KiB
  EXPECT_EQ(algo(p, 16, 4 * KiB), ShmAlgorithm::kTwoStep);     // issue 28: was one_step
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
  EXPECT_EQ(shm_chunk_bytes(p, 2), 512 * KiB);   // half a slot: three rotate in two
  EXPECT_EQ(shm_chunk_bytes(p, 8), 512 * KiB);   // 4 MiB in flight
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
