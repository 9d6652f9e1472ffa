// The compression closed forms (compression.h) against hand-computed
// values, and the simulator's use of them: its bytes are the closed forms'
// (tests/torch/compression_test.cc checks both against the runtime's
// traffic counters), PowerSGD and 1-bit beat uncompressed allreduce where
// the network is slow and lose where it is fast, and bad names are refused.
#include <gtest/gtest.h>

#include "lockstep/base/error.h"
#include "lockstep/policy/compression.h"
#include "lockstep/plan/simulator.h"
#include "plan/test_models.h"

namespace lockstep::plan {
namespace {

using namespace lockstep::policy;  // the decisions under test

TEST(PlanCompression, ParsesTheNamesAndRefusesOthers) {
  EXPECT_EQ(parse_compression("none").kind, CompressionKind::kNone);
  EXPECT_EQ(parse_compression("onebit-adam").kind, CompressionKind::kOneBitAdam);
  const CompressionSpec lamb = parse_compression("onebit-lamb");
  EXPECT_EQ(lamb.kind, CompressionKind::kOneBitLamb);
  EXPECT_EQ(lamb.name(), "onebit-lamb");
  EXPECT_TRUE(lamb.replaces_allreduce());
  const CompressionSpec p = parse_compression("powersgd:4");
  EXPECT_EQ(p.kind, CompressionKind::kPowerSGD);
  EXPECT_EQ(p.rank, 4);
  EXPECT_EQ(p.name(), "powersgd:4");
  EXPECT_TRUE(p.replaces_allreduce());
  EXPECT_FALSE(parse_compression("fp16").replaces_allreduce());
  for (const char* bad :
       {"powersgd:0", "powersgd:", "powersgd:2x", "zip", "onebit_adam", "onebit-lamb2"})
    EXPECT_THROW(parse_compression(bad), InvalidArgument) << bad;
}

TEST(PlanCompression, ClosedFormsByHand) {
  // 1000 values on 2 ranks: padded to 1008; rows of 63 sign bytes + 4.
  EXPECT_EQ(onebit_padded_length(1000, 2), 1008);
  EXPECT_EQ(onebit_row_bytes(1000, 2), 67);
  EXPECT_EQ(onebit_payload_bytes(1000, 2), 3 * 67);
  const std::vector<int64_t> w{256, 128}, conv{8, 3, 3, 3}, bias{16};
  EXPECT_EQ(powersgd_wire_elements(w, 4, 2.0), (256 + 128) * 4);
  EXPECT_EQ(powersgd_wire_elements(conv, 1, 2.0), 8 + 27);
  EXPECT_EQ(powersgd_wire_elements(bias, 4, 2.0), 16);
  // One step of {256x128, 16} on 4 ranks.
  const std::vector<std::vector<int64_t>> shapes{w, bias};
  auto none = compressed_step({}, shapes, 4);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].payload_bytes, 4 * (256 * 128 + 16));
  EXPECT_EQ(none[0].wire_bytes, 2 * 4 * (256 * 128 + 16) * 3 / 4);
  auto psgd = compressed_step(parse_compression("powersgd:4"), shapes, 4);
  ASSERT_EQ(psgd.size(), 2u);
  EXPECT_EQ(psgd[0].payload_bytes, 4 * (256 * 4 + 16));  // P factors and the bias
  EXPECT_EQ(psgd[1].payload_bytes, 4 * (128 * 4));       // Q factors
  auto onebit = compressed_step(parse_compression("onebit"), shapes, 4);
  ASSERT_EQ(onebit.size(), 2u);
  const int64_t row = (256 * 128 + 16 + 31) / 32 * 32 / 32 + 4;
  EXPECT_EQ(onebit[0].op, "alltoall");
  EXPECT_EQ(onebit[0].payload_bytes, 4 * row);
  EXPECT_EQ(onebit[0].wire_bytes, 3 * row);
  EXPECT_EQ(onebit[1].op, "allgather");
  EXPECT_EQ(onebit[1].payload_bytes, row);
  // 1-bit LAMB sends its momentum as 1-bit Adam does: the same rows.
  for (const char* c : {"onebit-adam", "onebit-lamb"}) {
    const auto same = compressed_step(parse_compression(c), shapes, 4);
    ASSERT_EQ(same.size(), 2u) << c;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(same[i].op, onebit[i].op) << c;
      EXPECT_EQ(same[i].payload_bytes, onebit[i].payload_bytes) << c;
      EXPECT_EQ(same[i].wire_bytes, onebit[i].wire_bytes) << c;
    }
  }
  EXPECT_EQ(compression_pass_bytes(parse_compression("onebit-lamb"), shapes),
            compression_pass_bytes(parse_compression("onebit"), shapes));
  EXPECT_TRUE(compressed_step(parse_compression("onebit"), shapes, 1).empty());
  EXPECT_EQ(compression_pass_bytes({}, shapes), 0);
  EXPECT_GT(compression_pass_bytes(parse_compression("onebit"), shapes), 0);
}

Profile shaped_profile(int grads, int64_t n, int64_t m) {
  Profile p = testing::make_profile(grads, n * m * 4);
  for (auto& g : p.gradients) g.shape = {n, m};
  return p;
}

Scenario two_nodes(const std::string& compression) {
  Scenario s;
  s.topology = {2, 1, "gloo", "auto"};
  s.compression = compression;
  return s;
}

TEST(PlanCompression, SimulatorBytesAreTheClosedForms) {
  const Profile p = shaped_profile(8, 512, 256);
  std::vector<std::vector<int64_t>> shapes(8, std::vector<int64_t>{512, 256});
  for (const char* c : {"powersgd:2", "onebit", "onebit-adam", "onebit-lamb"}) {
    const StepPrediction r = simulate(p, testing::make_network(), two_nodes(c));
    int64_t payload = 0, wire = 0;
    for (const auto& k : compressed_step(parse_compression(c), shapes, 2)) {
      payload += k.payload_bytes;
      wire += k.wire_bytes;
    }
    EXPECT_EQ(r.payload_bytes, payload) << c;
    EXPECT_EQ(r.wire_bytes, wire) << c;
    EXPECT_GT(r.compress_ms, 0) << c;
  }
  const StepPrediction none = simulate(p, testing::make_network(), two_nodes("none"));
  EXPECT_EQ(none.payload_bytes, 8 * 512 * 256 * 4);
}

TEST(PlanCompression, PaysOnASlowLinkNotOnAFastOne) {
  const Profile p = shaped_profile(8, 512, 256);
  const NetworkModel slow = testing::make_network(100e-6, 1.0 / 25e6);  // 200 Mbit/s
  const NetworkModel fast = testing::make_network(1e-6, 1.0 / 50e9);
  // What communication adds to the 100 ms of compute shrinks by at least 3x.
  auto added_ms = [&](const char* c) {
    const StepPrediction r = simulate(p, slow, two_nodes(c));
    return r.step_ms - r.compute_ms;
  };
  const double none_slow = added_ms("none");
  EXPECT_GT(none_slow, 50);
  EXPECT_LT(added_ms("onebit"), none_slow / 3);
  EXPECT_LT(added_ms("powersgd:4"), none_slow / 3);
  // On a fast link the compute of compression costs more than it saves,
  // and the bottleneck says so.
  const StepPrediction onebit_fast = simulate(p, fast, two_nodes("onebit"));
  EXPECT_GT(onebit_fast.step_ms, simulate(p, fast, two_nodes("none")).step_ms);
  EXPECT_EQ(onebit_fast.bottleneck, "compression compute");
}

TEST(PlanCompression, NamedErrors) {
  Profile p = testing::make_profile(4, 4096);  // no shapes
  EXPECT_THROW(simulate(p, testing::make_network(), two_nodes("zip")), InvalidArgument);
  try {
    simulate(p, testing::make_network(), two_nodes("powersgd:2"));
    ADD_FAILURE() << "PowerSGD without shapes";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no shape"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(simulate(p, testing::make_network(), two_nodes("onebit")));  // counts suffice
}

}  // namespace
}  // namespace lockstep::plan
