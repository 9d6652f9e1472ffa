// Closed-form allreduce costs against values computed by hand, and the
// algorithm each transport picks by size.
#include <gtest/gtest.h>

#include "lockstep/base/error.h"
#include "lockstep/plan/cost.h"
#include "lockstep/policy/compression.h"
#include "lockstep/policy/hierarchical.h"
#include "lockstep/policy/policies.h"

namespace lockstep::plan {
namespace {

NetworkModel model() {
  NetworkModel m;
  m.name = "test";
  m.host = HostModel{.gamma_s_per_byte = 1e-9, .copy_s_per_byte = 0, .cycle_overhead_s = 0};
  m.transports["shm"]["one_step"].cost = {1e-6, 1e-10};
  m.transports["shm"]["two_step"].cost = {2e-6, 2e-10};
  m.transports["gloo"]["ring"].cost = {10e-6, 1e-9};
  m.transports["mpi"]["recursive_doubling"].cost = {5e-6, 1e-9};
  m.transports["mpi"]["ring"].cost = {5e-6, 1e-9};
  return m;
}

TEST(PlanCost, RingMatchesHandComputedValues) {
  // n = 4, B = 1 MB: a = 2*3 = 6 steps, b = 2*3/4 MB = 1.5 MB, c = 3/4 MB.
  Coefficients k = ring(4, 1e6);
  EXPECT_DOUBLE_EQ(k.steps, 6);
  EXPECT_DOUBLE_EQ(k.bytes, 1.5e6);
  EXPECT_DOUBLE_EQ(k.reduced, 0.75e6);
  // alpha 10 us, beta 1 ns/B, gamma 1 ns/B: 60 us + 1.5 ms + 0.75 ms.
  Cost c = apply(k, {10e-6, 1e-9}, 1e-9);
  EXPECT_NEAR(c.alpha_s, 60e-6, 1e-15);
  EXPECT_NEAR(c.beta_s, 1.5e-3, 1e-15);
  EXPECT_NEAR(c.gamma_s, 0.75e-3, 1e-15);
  EXPECT_NEAR(c.total(), 2.31e-3, 1e-12);
}

TEST(PlanCost, RecursiveDoublingRoundsUpToAPowerOfTwo) {
  Coefficients k = recursive_doubling(5, 1000);  // ceil(log2 5) = 3 rounds
  EXPECT_DOUBLE_EQ(k.steps, 3);
  EXPECT_DOUBLE_EQ(k.bytes, 3000);
  EXPECT_DOUBLE_EQ(k.reduced, 3000);
  EXPECT_DOUBLE_EQ(recursive_doubling(8, 1).steps, 3);
}

TEST(PlanCost, SharedMemoryAlgorithmsFollowShmCollectives) {
  // One step: stage B, reduce all n (n - 1 extra operands).
  Coefficients one = shm_one_step(3, 4096);
  EXPECT_DOUBLE_EQ(one.steps, 1);
  EXPECT_DOUBLE_EQ(one.bytes, 4096);
  EXPECT_DOUBLE_EQ(one.reduced, 2 * 4096);
  // Two step over 3 MiB in 1 MiB chunks, pipelined: a step per chunk, one
  // to drain.
  const double mib = 1 << 20;
  Coefficients two = shm_two_step(2, 3 * mib, mib);
  EXPECT_DOUBLE_EQ(two.steps, 4);
  EXPECT_DOUBLE_EQ(two.bytes, 1.5 * 3 * mib);    // (2n-1)/n B
  EXPECT_DOUBLE_EQ(two.reduced, 0.5 * 3 * mib);  // (n-1)/n B
  // A message smaller than a slot is still one chunk.
  EXPECT_DOUBLE_EQ(shm_two_step(2, 100, mib).steps, 2);
  // Reduce-scatter of 4 MiB among 4: blocks of 1 MiB in rounds of slot/4.
  Coefficients rs = shm_reduce_scatter(4, 4 * mib, mib);
  EXPECT_DOUBLE_EQ(rs.steps, 4);
  EXPECT_DOUBLE_EQ(rs.bytes, 3 * mib);
  EXPECT_DOUBLE_EQ(rs.reduced, 3 * mib);
  Coefficients ag = shm_allgather(4, 4 * mib, mib);
  EXPECT_DOUBLE_EQ(ag.steps, 1);
  EXPECT_DOUBLE_EQ(ag.bytes, 5 * mib);
  EXPECT_DOUBLE_EQ(ag.reduced, 0);
}

TEST(PlanCost, OneRankCostsNothing) {
  EXPECT_DOUBLE_EQ(apply(ring(1, 1e9), {1, 1}, 1).total(), 0);
  Topology t;  // 1 node x 1 rank
  EXPECT_EQ(t.backend(), "none");
  EXPECT_DOUBLE_EQ(allreduce_cost(model(), t, 1e9, 4).cost.total(), 0);
}

TEST(PlanCost, EachTransportPicksItsAlgorithmBySize) {
  NetworkModel m = model();
  EXPECT_EQ(algorithm_for(m, "shm", 2, 16 << 10), "one_step");  // at LOCKSTEP_SHM_SMALL_BYTES
  EXPECT_EQ(algorithm_for(m, "shm", 2, (16 << 10) + 4), "two_step");
  EXPECT_EQ(algorithm_for(m, "gloo", 8, 4), "ring");
  EXPECT_EQ(algorithm_for(m, "gloo", 8, 1e9), "ring");
  EXPECT_EQ(algorithm_for(m, "mpi", 8, 9999), "recursive_doubling");
  EXPECT_EQ(algorithm_for(m, "mpi", 8, 10000), "ring");
  m.shm_small_bytes = 1024;
  EXPECT_EQ(algorithm_for(m, "shm", 2, 2048), "two_step");
}

TEST(PlanCost, TopologyPicksTheBackendLikeTheFactory) {
  EXPECT_EQ((Topology{1, 4, "gloo", "auto"}).backend(), "shm");
  EXPECT_EQ((Topology{2, 1, "gloo", "auto"}).backend(), "gloo");
  EXPECT_EQ((Topology{2, 4, "gloo", "auto"}).backend(), "hierarchical-gloo");
  EXPECT_EQ((Topology{2, 4, "gloo", "0"}).backend(), "gloo");
  EXPECT_EQ((Topology{2, 1, "mpi", "1"}).backend(), "hierarchical-mpi");
}

// `bytes` over 4 hosts x 2 by hand: shm reduce-scatter (2, bytes), gloo
// ring among 4 hosts of bytes / 2 at `cross` (its beta already doubled for
// the NIC the 2 local ranks share), shm allgather (2, bytes); model()'s
// shm two_step costs, gamma 1 ns/B, 1 MiB slots.
double hierarchical_4x2(double bytes, AlphaBeta cross) {
  const AlphaBeta shm{2e-6, 2e-10};
  const double slot = 1 << 20;
  return apply(shm_reduce_scatter(2, bytes, slot), shm, 1e-9).total() +
         apply(ring(4, bytes / 2), cross, 1e-9).total() +
         apply(shm_allgather(2, bytes, slot), shm, 0).total();
}

TEST(PlanCost, HierarchicalIsTheSumOfItsStages) {
  NetworkModel m = model();
  const double mib = 1 << 20;
  Topology t{4, 2, "gloo", "auto"};
  // 8 MiB f32: the cross stage moves 4 MiB blocks with beta x 2.
  double want = hierarchical_4x2(8 * mib, {10e-6, 2e-9});
  AllreduceCost c = allreduce_cost(m, t, 8 * mib, 4);
  EXPECT_NEAR(c.cost.total(), want, 1e-12);
  EXPECT_NE(c.algorithm.find("gloo ring(4)"), std::string::npos) << c.algorithm;
  // Fewer elements than local ranks: the flat path over all 8 ranks.
  AllreduceCost tiny = allreduce_cost(m, t, 4, 4);
  EXPECT_NEAR(tiny.cost.total(), apply(ring(8, 4), {10e-6, 1e-9}, 1e-9).total(), 1e-15);
}

NetworkModel banded() {
  NetworkModel m = model();
  // Bands measured at 4 B..16 KiB and 64 KiB..4 MiB; the line over all
  // sizes (10 us, 1 ns/B) must not be used.
  m.transports["gloo"]["ring"].bands = {{4, 16384, {150e-6, 2e-8}, {}},
                                        {65536, 4 << 20, {10e-6, 8e-9}, {}}};
  return m;
}

TEST(PlanCost, SizePicksTheBandAroundTheKnot) {
  const NetworkModel m = banded();
  auto alpha_us = [&](double b) { return m.cost("gloo", "ring", b).alpha_s * 1e6; };
  auto beta = [&](double b) { return m.cost("gloo", "ring", b).beta_s_per_byte; };
  EXPECT_DOUBLE_EQ(alpha_us(1), 150);  // below the first band: its line
  EXPECT_DOUBLE_EQ(alpha_us(4), 150);
  EXPECT_DOUBLE_EQ(alpha_us(16384), 150);
  EXPECT_DOUBLE_EQ(beta(16384), 2e-8);
  // 32 KiB is halfway from 16 to 64 KiB in log(B): the mean of the lines.
  EXPECT_NEAR(alpha_us(32768), 80, 1e-9);
  EXPECT_NEAR(beta(32768), 1.4e-8, 1e-20);
  // Just past the knot: nearly the lower line (continuous).
  EXPECT_NEAR(alpha_us(16385), 150, 0.01);
  EXPECT_NEAR(alpha_us(65535), 10, 0.01);
  EXPECT_DOUBLE_EQ(alpha_us(65536), 10);
  EXPECT_DOUBLE_EQ(beta(65536), 8e-9);
  EXPECT_DOUBLE_EQ(alpha_us(4 << 20), 10);
  EXPECT_DOUBLE_EQ(alpha_us(100e6), 10);  // above the last band: its line
  // A flat allreduce over 2 hosts: ring(2, B) at that size's band.
  Topology flat{2, 1, "gloo", "auto"};
  EXPECT_NEAR(allreduce_cost(m, flat, 1024, 4).cost.total(), 2 * 150e-6 + 1024 * 2e-8 + 512 * 1e-9,
              1e-15);
  EXPECT_NEAR(allreduce_cost(m, flat, 1 << 20, 4).cost.total(),
              2 * 10e-6 + (1 << 20) * 8e-9 + (1 << 19) * 1e-9, 1e-15);
}

TEST(PlanCost, HierarchicalCrossStageTakesTheBandOfItsBlock) {
  const NetworkModel m = banded();
  const double mib = 1 << 20;
  Topology t{4, 2, "gloo", "auto"};
  // 8 MiB over 4 hosts x 2: each local rank's cross-host allreduce is a
  // 4 MiB block (upper band, beta x 2 for the shared NIC) ...
  EXPECT_NEAR(allreduce_cost(m, t, 8 * mib, 4).cost.total(),
              hierarchical_4x2(8 * mib, {10e-6, 16e-9}), 1e-12);
  // ... and 16 KiB makes 8 KiB blocks (lower band).
  EXPECT_NEAR(allreduce_cost(m, t, 16384, 4).cost.total(), hierarchical_4x2(16384, {150e-6, 4e-8}),
              1e-12);
}

TEST(PlanCost, MissingTransportIsAnErrorNamingTheFix) {
  NetworkModel m = model();
  m.transports.erase("gloo");
  try {
    allreduce_cost(m, Topology{2, 1, "gloo", "auto"}, 1e6, 4);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("lockstep bench fit --backend gloo"), std::string::npos)
        << e.what();
  }
}

// The hierarchical rule the transport and the planner share
// (lockstep/policy/hierarchical.h): auto needs peers on both stages, 1 either.
TEST(PlanCost, HierarchicalPathFollowsTheTransportsRule) {
  using policy::HierarchicalMode;
  EXPECT_TRUE(policy::hierarchical_taken(HierarchicalMode::kAuto, 2, 2));
  EXPECT_FALSE(policy::hierarchical_taken(HierarchicalMode::kAuto, 2, 1));
  EXPECT_FALSE(policy::hierarchical_taken(HierarchicalMode::kAuto, 1, 4));
  EXPECT_TRUE(policy::hierarchical_taken(HierarchicalMode::kOn, 2, 1));
  EXPECT_FALSE(policy::hierarchical_taken(HierarchicalMode::kOff, 4, 4));
  EXPECT_EQ((Topology{.nodes = 2, .ranks_per_node = 2}).backend(), "hierarchical-gloo");
  EXPECT_EQ((Topology{.nodes = 2, .ranks_per_node = 1}).backend(), "gloo");
  EXPECT_EQ(
      (Topology{.nodes = 2, .ranks_per_node = 1, .cross = "gloo", .hierarchical = "on"}).backend(),
      "hierarchical-gloo");  // the runtime's spelling, which the planner refused as off
  EXPECT_EQ(
      (Topology{.nodes = 2, .ranks_per_node = 4, .cross = "mpi", .hierarchical = "0"}).backend(),
      "mpi");
  EXPECT_THROW(
      (Topology{.nodes = 2, .ranks_per_node = 2, .cross = "gloo", .hierarchical = "yes"}).backend(),
      InvalidArgument);
  EXPECT_TRUE(policy::hierarchical_goes_flat(3, 4, false));  // fewer elements than local ranks
  EXPECT_FALSE(policy::hierarchical_goes_flat(4, 4, false));
  EXPECT_TRUE(policy::hierarchical_goes_flat(1 << 20, 4, true));  // integer average
}

// The header the engine lays out (Note [Negotiation]): 3 + 4 per rank + 1
// per cached name; and the busBw convention for allreduce bytes.
TEST(PlanCost, NegotiationHeaderAndAllreduceWireBytes) {
  EXPECT_EQ(policy::negotiation_header_fields(1, 0), 7);
  EXPECT_EQ(policy::negotiation_header_fields(4096, 10), 3 + 4 * 4096 + 10);
  EXPECT_EQ(policy::allreduce_wire_bytes(1000, 1), 0);
  EXPECT_EQ(policy::allreduce_wire_bytes(1000, 2), 1000);
  EXPECT_EQ(policy::allreduce_wire_bytes(1000, 4), 1500);
}

// DistributedOptimizer's resolve_overlap and the planner's overlap_for end
// in this one rule (issue 44).
TEST(PlanCost, OverlapSettingResolvesByOneRule) {
  using policy::OverlapMode;
  EXPECT_EQ(policy::parse_overlap("", "--overlap"), OverlapMode::kAuto);
  EXPECT_EQ(policy::parse_overlap("auto", "--overlap"), OverlapMode::kAuto);
  EXPECT_EQ(policy::parse_overlap("on", "--overlap"), OverlapMode::kOn);
  EXPECT_EQ(policy::parse_overlap("off", "LOCKSTEP_OVERLAP"), OverlapMode::kOff);
  try {
    policy::parse_overlap("sometimes", "LOCKSTEP_OVERLAP");
    ADD_FAILURE() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "LOCKSTEP_OVERLAP='sometimes' is not one of auto, on, off");
  }
  auto choose = policy::choose_overlap;
  EXPECT_TRUE(choose(OverlapMode::kOn, 1, true, 1, 1).overlap);
  EXPECT_TRUE(choose(OverlapMode::kOn, 1, true, 1, 1).forced);
  EXPECT_FALSE(choose(OverlapMode::kOff, 8, false, 8, 1).overlap);
  EXPECT_FALSE(choose(OverlapMode::kAuto, 1, false, 8, 1).overlap);  // nothing to reduce
  const policy::OverlapChoice busy = choose(OverlapMode::kAuto, 2, true, 1, 1);
  EXPECT_FALSE(busy.overlap);
  EXPECT_FALSE(busy.forced);
  EXPECT_STREQ(busy.why, "shared memory and no spare core");
  EXPECT_TRUE(choose(OverlapMode::kAuto, 2, true, 2, 1).overlap);   // a spare core
  EXPECT_TRUE(choose(OverlapMode::kAuto, 2, false, 1, 1).overlap);  // across hosts
  EXPECT_TRUE(choose(OverlapMode::kAuto, 2, true, 0, 4).overlap);   // cores unknown
}

// The fp16/bf16 wire width and the 1/size pass after an averaged sum, as
// the torch allreduce scheme runs them and the simulator prices them.
TEST(PlanCost, CastWireWidthAndScalePassAfterTheSum) {
  using policy::CompressionKind;
  EXPECT_EQ(policy::wire_element_bytes(CompressionKind::kFp16, 4, true), 2);
  EXPECT_EQ(policy::wire_element_bytes(CompressionKind::kBf16, 8, true), 2);
  EXPECT_EQ(policy::wire_element_bytes(CompressionKind::kBf16, 2, true), 2);
  EXPECT_EQ(policy::wire_element_bytes(CompressionKind::kFp16, 4, false),
            4);  // integers as they are
  EXPECT_EQ(policy::wire_element_bytes(CompressionKind::kNone, 8, true), 8);
  EXPECT_TRUE(policy::scales_after_reduce(CompressionKind::kNone, true));
  EXPECT_FALSE(
      policy::scales_after_reduce(CompressionKind::kFp16, true));  // divided before the cast
  EXPECT_FALSE(policy::scales_after_reduce(CompressionKind::kBf16, true));
  EXPECT_FALSE(policy::scales_after_reduce(CompressionKind::kNone, false));  // a sum
}

}  // namespace
}  // namespace lockstep::plan
