// The step simulator's invariants: one rank is the profile; never faster
// than compute alone, nor (without overlap) than compute plus communication;
// monotone in bandwidth and latency; stragglers and fusion as the engine
// does them.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/base/error.h"
#include "lockstep/plan/simulator.h"
#include "plan/test_models.h"

namespace lockstep::plan {
namespace {

using policy::fusion_batches;
using policy::FusionItem;  // the rule the simulator shares with the engine

using testing::make_network;
using testing::make_profile;

Scenario scenario(int nodes, int per_node = 1, std::string overlap = "auto") {
  Scenario s;
  s.topology = {nodes, per_node, "gloo", "auto"};
  s.overlap = std::move(overlap);
  return s;
}

TEST(PlanSimulator, OneRankIsTheProfile) {
  Profile p = make_profile(20, 1 << 20, 3);
  StepPrediction r = simulate(p, make_network(), scenario(1));
  EXPECT_DOUBLE_EQ(r.step_ms, summarize(p).compute_ms);
  EXPECT_DOUBLE_EQ(r.efficiency, 1.0);
  EXPECT_EQ(r.collectives, 0);
  EXPECT_EQ(r.backend, "none");
  EXPECT_DOUBLE_EQ(r.samples_per_s, 64 / (r.step_ms / 1e3));
}

// plan validate predicts its np 1 points without fitting anything.
TEST(PlanSimulator, OneRankNeedsNoNetworkButMoreRanksNeedHostCosts) {
  Profile p = make_profile(20, 1 << 20, 3);
  NetworkModel bare;
  bare.name = "bare-net";
  StepPrediction r = simulate(p, bare, scenario(1));
  EXPECT_DOUBLE_EQ(r.step_ms, summarize(p).compute_ms);
  EXPECT_EQ(r.collectives, 0);
  for (Scenario s : {scenario(2), scenario(1, 2)}) {
    try {
      simulate(p, bare, s);
      ADD_FAILURE() << "simulated " << s.topology.ranks() << " ranks without host costs";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'bare-net' has no host costs"), std::string::npos)
          << e.what();
    }
  }
}

TEST(PlanSimulator, NeverFasterThanComputeOrThanCommunicationWithoutOverlap) {
  for (int64_t bytes : {int64_t(4), int64_t(64) << 10, int64_t(16) << 20})
    for (int nodes : {2, 8, 64, 1024})
      for (int per_node : {1, 4})
        for (const char* overlap : {"on", "off"}) {
          Profile p = make_profile(30, bytes);
          StepPrediction r = simulate(p, make_network(), scenario(nodes, per_node, overlap));
          SCOPED_TRACE(
              fmt::format("bytes {} nodes {} x {} overlap {}", bytes, nodes, per_node, overlap));
          EXPECT_GE(r.step_ms, r.compute_ms);
          EXPECT_GE(r.step_ms, r.comm_ms);  // the engine's work fits inside the step
          if (std::string(overlap) == "off") {
            EXPECT_NEAR(r.step_ms, r.compute_ms + r.straggler_ms + r.comm_ms, 1e-9);
          }
          EXPECT_LE(r.efficiency, 1.0);
          EXPECT_GT(r.collectives, 0);
        }
}

TEST(PlanSimulator, MonotoneInBandwidthAndLatency) {
  Profile p = make_profile(40, 4 << 20);
  for (const char* overlap : {"on", "off"})
    for (int nodes : {2, 16, 256}) {
      double last = 0;
      for (double beta : {1e-11, 1e-10, 1e-9, 1e-8}) {
        double step = simulate(p, make_network(20e-6, beta), scenario(nodes, 2, overlap)).step_ms;
        EXPECT_GE(step, last - 1e-9) << "beta " << beta << " nodes " << nodes << " " << overlap;
        last = step;
      }
      last = 0;
      for (double alpha : {1e-7, 1e-6, 1e-5, 1e-4, 1e-3}) {
        double step = simulate(p, make_network(alpha, 1e-9), scenario(nodes, 2, overlap)).step_ms;
        EXPECT_GE(step, last - 1e-9) << "alpha " << alpha << " nodes " << nodes << " " << overlap;
        last = step;
      }
    }
}

TEST(PlanSimulator, OverlapHidesCommunicationBehindBackward) {
  // 20 x 1 MiB at 1 GB/s across 2 hosts: ~40 ms of ring traffic, produced
  // through a 60 ms backward.
  Profile p = make_profile(20, 1 << 20);
  StepPrediction on = simulate(p, make_network(), scenario(2, 1, "on"));
  StepPrediction off = simulate(p, make_network(), scenario(2, 1, "off"));
  EXPECT_LT(on.step_ms, off.step_ms);
  EXPECT_GT(on.overlapped_share, 0.5);
  EXPECT_DOUBLE_EQ(off.overlapped_share, 0.0);
  EXPECT_TRUE(on.overlap);
  EXPECT_FALSE(off.overlap);
}

TEST(PlanSimulator, OverlapAutoFollowsDistributedOptimizer) {
  Scenario s = scenario(1, 2);
  s.cores_per_node = 2;
  s.threads_per_rank = 1;
  EXPECT_FALSE(overlap_for(s));  // one host, no spare core
  s.cores_per_node = 4;
  EXPECT_TRUE(overlap_for(s));  // a spare core per worker
  s = scenario(2, 2);
  s.cores_per_node = 2;
  EXPECT_TRUE(overlap_for(s));  // across hosts
}

TEST(PlanSimulator, SharedMemoryOnBusyCoresCannotOverlap) {
  Profile p = make_profile(20, 4 << 20);
  Scenario s = scenario(1, 2, "on");
  s.cores_per_node = 2;  // each rank's only core computes
  StepPrediction r = simulate(p, make_network(), s);
  EXPECT_TRUE(r.comm_shares_cores);
  EXPECT_NEAR(r.step_ms, r.compute_ms + r.straggler_ms + r.comm_ms, 1e-6);
}

TEST(PlanSimulator, ColocatedSlowdownScalesComputeOfRanksSharingANode) {
  Profile p = make_profile(20, 4 << 20, 0);
  const double alone = summarize(p).compute_ms;
  Scenario s = scenario(1, 2, "off");
  const StepPrediction base = simulate(p, make_network(), s);
  s.colocated_slowdown = 1.5;
  const StepPrediction slow = simulate(p, make_network(), s);
  // Without overlap the step is compute + communication: the factor adds
  // exactly half of the lone compute, and communication stays as it was.
  EXPECT_NEAR(slow.compute_ms, 1.5 * alone, 1e-9);
  EXPECT_NEAR(slow.step_ms - base.step_ms, 0.5 * alone, 1e-9);
  EXPECT_NEAR(slow.comm_ms, base.comm_ms, 1e-9);
  // Efficiency stays against one rank alone (the profile).
  EXPECT_NEAR(slow.efficiency, alone / slow.step_ms, 1e-12);
  // One rank per node: nothing shares the node, the factor does not apply.
  Scenario apart = scenario(2, 1, "off");
  const double two_nodes = simulate(p, make_network(), apart).step_ms;
  apart.colocated_slowdown = 1.5;
  EXPECT_DOUBLE_EQ(simulate(p, make_network(), apart).step_ms, two_nodes);
  // ... unless the nodes are one machine's namespaces (plan validate's
  // hosts): then their ranks contend like a node's, by the same factor.
  apart.nodes_share_machine = true;
  EXPECT_NEAR(simulate(p, make_network(), apart).step_ms - two_nodes, 0.5 * alone, 1e-9);
  Scenario one_rank = scenario(1, 1, "off");
  one_rank.nodes_share_machine = true;
  one_rank.colocated_slowdown = 1.5;
  EXPECT_NEAR(simulate(p, make_network(), one_rank).step_ms, alone, 1e-9);
  // With overlap, gradients become ready later by the same factor, so the
  // step never gets faster.
  Scenario on = scenario(4, 2, "on");
  double last = 0;
  for (double f : {1.0, 1.2, 2.0}) {
    on.colocated_slowdown = f;
    const double step = simulate(p, make_network(), on).step_ms;
    EXPECT_GE(step, last);
    last = step;
  }
}

TEST(PlanSimulator, WakeWaitDelaysOperationsDuringComputeAndTheFirstAsItEnds) {
  Profile p = make_profile(20, 64 << 10, 0);
  Scenario s = scenario(2, 1, "off");
  const StepPrediction off = simulate(p, make_network(), s);
  s.wake_wait_ms = 4;
  // Without overlap every operation starts after backward: only the first,
  // which wakes the engine's thread as compute ends, waits (once).
  const StepPrediction off_wait = simulate(p, make_network(), s);
  EXPECT_NEAR(off_wait.step_ms, off.step_ms + 4, 1e-9);
  EXPECT_DOUBLE_EQ(off_wait.wake_wait_ms, 4);
  EXPECT_GT(off_wait.cycles + off_wait.collectives, 1);
  // With overlap, the operations that start before backward ends wait W
  // each (a cycle and its collectives), and only those.
  s.overlap = "on";
  s.wake_wait_ms = 0;
  const StepPrediction on = simulate(p, make_network(), s);
  double last = on.step_ms;
  for (double w : {1.0, 4.0, 16.0}) {
    s.wake_wait_ms = w;
    const StepPrediction r = simulate(p, make_network(), s);
    EXPECT_GT(r.wake_wait_ms, 0);
    EXPECT_NEAR(std::fmod(r.wake_wait_ms, w), 0, 1e-9);  // whole operations
    EXPECT_LE(r.wake_wait_ms, w * (r.cycles + r.collectives));
    EXPECT_GE(r.step_ms, last);
    EXPECT_NEAR(r.comm_ms - r.wake_wait_ms, on.comm_ms, on.comm_ms * 0.5 + 1e-9);
    last = r.step_ms;
  }
}

TEST(PlanSimulator, StragglersGrowWithRanksAndJitter) {
  Profile steady = make_profile(4, 1024, 0), noisy = make_profile(4, 1024, 5);
  EXPECT_DOUBLE_EQ(simulate(steady, make_network(), scenario(64)).straggler_ms, 0);
  double s2 = simulate(noisy, make_network(), scenario(2)).straggler_ms;
  double s64 = simulate(noisy, make_network(), scenario(64)).straggler_ms;
  EXPECT_GT(s2, 0);
  EXPECT_GT(s64, s2);
  // sigma x E[max of 2 normals] = sigma / sqrt(pi).
  Scenario s = scenario(2);
  s.jitter_ms = 1.0;
  EXPECT_NEAR(simulate(noisy, make_network(), s).straggler_ms, 1 / std::sqrt(M_PI), 1e-4);
}

TEST(PlanSimulator, FusionPacksLikeTheEngine) {
  // In order, same key only; tensors above threshold / 8 alone.
  std::vector<FusionItem> items = {{100, 0}, {400, 0}, {100, 0}, {50, 1}, {2000, 0}, {60, 0}};
  auto b = fusion_batches(items, 800);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0], (std::vector<size_t>{0, 2, 5}));
  EXPECT_EQ(b[1], (std::vector<size_t>{1}));
  EXPECT_EQ(b[2], (std::vector<size_t>{3}));
  EXPECT_EQ(b[3], (std::vector<size_t>{4}));
  EXPECT_EQ(fusion_batches(items, 0).size(), items.size());
  // Skipping what does not fit: eight of 100 fill 800, the ninth starts anew.
  std::vector<FusionItem> nine(9, FusionItem{100, 0});
  auto full = fusion_batches(nine, 800);
  ASSERT_EQ(full.size(), 2u);
  EXPECT_EQ(full[0].size(), 8u);
  EXPECT_EQ(full[1], (std::vector<size_t>{8}));
}

TEST(PlanSimulator, OneCycleCostsTheHeaderAllreduceOfEveryRank) {
  // Overlap off: one cycle, whose int32 header has 3 + 4 per rank (blob
  // length, joined, shutdown, blocked) + 1 per cached name fields, as
  // negotiator.cc lays it out (the planner counted 3 per rank before
  // policy::negotiation_header_fields), then one fused batch of both tensors.
  Profile p = make_profile(2, 4);
  NetworkModel m = make_network();
  Scenario s = scenario(1024, 4, "off");
  StepPrediction r = simulate(p, m, s);
  EXPECT_EQ(r.cycles, 1);
  EXPECT_EQ(r.collectives, 1);
  const double header = 4.0 * (3 + 4 * 4096 + 2);
  const double copies = (2 * 8 + 8) * m.host->copy_s_per_byte;  // in, out, 1/size pass
  const double want = m.host->cycle_overhead_s +
                      allreduce_cost(m, s.topology, header, 4).cost.total() + copies +
                      allreduce_cost(m, s.topology, 8, 4).cost.total();
  EXPECT_NEAR(r.comm_ms, want * 1e3, 1e-9);
}

TEST(PlanSimulator, CompressionHalvesTheWire) {
  Profile p = make_profile(20, 8 << 20);
  Scenario s = scenario(16, 1, "off");
  double none = simulate(p, make_network(), s).beta_ms;
  s.compression = "fp16";
  // Only the negotiation header (a few hundred bytes) stays uncompressed.
  EXPECT_NEAR(simulate(p, make_network(), s).beta_ms, none / 2, none * 1e-5);
}

// The 1/size pass after an averaged sum runs for an uncompressed gradient,
// not for a cast one (divided before the cast): policy::scales_after_reduce,
// which the torch allreduce scheme asks too. One gradient runs unfused, so
// the pass is the step's only copy.
TEST(PlanSimulator, ScalePassAfterTheSumFollowsThePolicy) {
  Profile p = make_profile(1, 64 << 20);
  Scenario s = scenario(16, 1, "off");
  const NetworkModel m = make_network();
  EXPECT_NEAR(simulate(p, m, s).copy_ms, double(64 << 20) * m.host->copy_s_per_byte * 1e3, 1e-9);
  s.compression = "bf16";
  EXPECT_DOUBLE_EQ(simulate(p, m, s).copy_ms, 0.0);
}

TEST(PlanSimulator, BadScenariosAreRejectedByName) {
  Profile p = make_profile();
  Scenario s = scenario(2);
  s.compression = "int4";
  EXPECT_THROW(simulate(p, make_network(), s), InvalidArgument);
  s = scenario(0);
  EXPECT_THROW(simulate(p, make_network(), s), InvalidArgument);
  s = scenario(2);
  s.overlap = "sometimes";
  EXPECT_THROW(simulate(p, make_network(), s), InvalidArgument);
  s = scenario(2);
  s.wake_wait_ms = -1;
  EXPECT_THROW(simulate(p, make_network(), s), InvalidArgument);
  for (double f : {0.0, -1.0, std::nan("")}) {
    s = scenario(1, 2);
    s.colocated_slowdown = f;
    EXPECT_THROW(simulate(p, make_network(), s), InvalidArgument);
  }
}

}  // namespace
}  // namespace lockstep::plan
