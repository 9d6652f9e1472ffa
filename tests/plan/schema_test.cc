// The profile and network file formats: round trips, and clear errors for
// files that are not what they claim.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"
#include "lockstep/plan/network.h"
#include "lockstep/plan/profile.h"
#include "plan/test_models.h"

namespace lockstep::plan {
namespace {

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PlanSchema, ProfileRoundTrips) {
  Profile p = testing::make_profile(3, 1000, 2);
  p.program = "train --epochs 1";
  p.world_size = 2;
  p.overlap = true;
  Profile q = parse_profile(profile_to_json(p), "mem");
  ASSERT_EQ(q.steps.size(), p.steps.size());
  ASSERT_EQ(q.gradients.size(), 3u);
  EXPECT_EQ(q.program, p.program);
  EXPECT_EQ(q.world_size, 2);
  EXPECT_TRUE(q.overlap);
  EXPECT_DOUBLE_EQ(q.steps[1].step_ms, p.steps[1].step_ms);
  EXPECT_EQ(q.gradients[2].name, "g2");
  EXPECT_DOUBLE_EQ(q.gradients[0].ready_ms, p.gradients[0].ready_ms);
  auto j = nlohmann::json::parse(profile_to_json(p));
  EXPECT_EQ(j["schema"], "lockstep.profile/1");
  EXPECT_DOUBLE_EQ(j["summary"]["step_ms"].get<double>(), summarize(p).step_ms);
}

TEST(PlanSchema, ProfileSummaryUsesMedians) {
  Profile p = testing::make_profile(1, 4, 0);
  p.steps[0].step_ms = 1000;  // one outlier step (a checkpoint, say)
  ProfileSummary s = summarize(p);
  EXPECT_DOUBLE_EQ(s.step_ms, 100);
  EXPECT_DOUBLE_EQ(s.forward_ms, 30);
  EXPECT_DOUBLE_EQ(s.samples_per_step, 64);
  EXPECT_EQ(s.gradient_bytes, 4);
}

TEST(PlanSchema, BadProfilesNameTheFieldAndTheFile) {
  auto j = nlohmann::json::parse(profile_to_json(testing::make_profile()));
  EXPECT_NE(error_of([&] { parse_profile("{", "p.json"); }).find("p.json: not valid JSON"),
            std::string::npos);
  auto wrong = j;
  wrong["schema"] = "lockstep.network/1";
  EXPECT_NE(error_of([&] { parse_profile(wrong.dump(), "p.json"); }).find("not lockstep.profile/1"),
            std::string::npos);
  wrong = j;
  wrong["steps"][2]["backward_ms"] = "slow";
  EXPECT_NE(error_of([&] {
              parse_profile(wrong.dump(), "p.json");
            }).find("p.json.steps[2].backward_ms: must be a number"),
            std::string::npos);
  wrong = j;
  wrong["gradients"][0]["dtype"] = "f128";
  EXPECT_NE(error_of([&] { parse_profile(wrong.dump(), "p.json"); }).find("f128"),
            std::string::npos);
  wrong = j;
  wrong["steps"] = nlohmann::json::array();
  EXPECT_NE(error_of([&] { parse_profile(wrong.dump(), "p.json"); }).find("no step was recorded"),
            std::string::npos);
  wrong = j;
  wrong.erase("gradients");
  EXPECT_NE(
      error_of([&] { parse_profile(wrong.dump(), "p.json"); }).find("p.json.gradients: missing"),
      std::string::npos);
}

TEST(PlanSchema, NetworkRoundTripsAndMerges) {
  NetworkModel m = testing::make_network();
  m.transports["gloo"]["ring"].fit = {12, 0.03, 0.08};
  m.points.push_back({"gloo", "ring", 2, 4096, 1e-4, 1.1e-4});
  NetworkModel q = parse_network(network_to_json(m), "n.json");
  EXPECT_EQ(q.name, "test");
  ASSERT_TRUE(q.host.has_value());
  EXPECT_DOUBLE_EQ(q.host->gamma_s_per_byte, 2e-10);
  EXPECT_DOUBLE_EQ(q.cost("gloo", "ring", 4096).alpha_s, 20e-6);
  EXPECT_EQ(q.transports["gloo"]["ring"].fit.points, 12);
  ASSERT_EQ(q.points.size(), 1u);
  EXPECT_EQ(q.points[0].bytes, 4096);
  // A preset over a fit: the preset's transport, the fit's host and shm.
  NetworkModel merged = merge(q, *find_preset("eth-25g"));
  EXPECT_TRUE(merged.preset);
  EXPECT_DOUBLE_EQ(merged.host->gamma_s_per_byte, 2e-10);
  EXPECT_DOUBLE_EQ(merged.cost("shm", "two_step", 1 << 20).alpha_s, 2e-6);
  EXPECT_DOUBLE_EQ(merged.cost("gloo", "ring", 1 << 20).alpha_s, 25e-6);
}

// A gloo fit as lockstep.network/1 files were written before size bands.
constexpr const char* kFitWithoutBands = R"({"schema": "lockstep.network/1", "name": "old fit",
  "description": "lockstep bench fit --backend gloo", "preset": false,
  "shm_small_bytes": 16384, "shm_slot_bytes": 1048576, "nic_shared": true,
  "host": {"gamma_s_per_byte": 3e-10, "copy_s_per_byte": 1e-10, "cycle_overhead_s": 2e-5},
  "transports": {"gloo": {"ring": {"alpha_s": 1.07e-4, "beta_s_per_byte": 7.7e-9,
    "fit": {"points": 11, "rms_rel_error": 0.39, "max_rel_error": 0.71}}}},
  "points": [{"transport": "gloo", "algorithm": "ring", "np": 2, "bytes": 4194304,
              "measured_s": 0.0354, "fitted_s": 0.0331}]})";

TEST(PlanSchema, NetworkWithoutBandsParsesAndRoundTrips) {
  NetworkModel m = parse_network(kFitWithoutBands, "old.json");
  const AlgorithmModel& a = m.transports["gloo"]["ring"];
  EXPECT_TRUE(a.bands.empty());
  for (double b : {4.0, 65536.0, 4194304.0, 1e9}) {
    EXPECT_DOUBLE_EQ(m.cost("gloo", "ring", b).alpha_s, 1.07e-4) << b;
    EXPECT_DOUBLE_EQ(m.cost("gloo", "ring", b).beta_s_per_byte, 7.7e-9) << b;
  }
  const std::string written = network_to_json(m);
  EXPECT_EQ(nlohmann::json::parse(written)["transports"]["gloo"]["ring"].count("bands"), 0u);
  NetworkModel q = parse_network(written, "again.json");
  EXPECT_EQ(network_to_json(q), written);
  EXPECT_EQ(q.transports["gloo"]["ring"].fit.points, 11);
  ASSERT_EQ(q.points.size(), 1u);
  EXPECT_DOUBLE_EQ(q.points[0].measured_s, 0.0354);
}

TEST(PlanSchema, NetworkBandsRoundTripAndBadRangesAreNamed) {
  NetworkModel m = testing::make_network();
  m.transports["gloo"]["ring"].bands = {{4, 16384, {150e-6, 2e-8}, {7, 0.01, 0.02}},
                                        {65536, 4 << 20, {10e-6, 8e-9}, {4, 0.005, 0.01}}};
  const std::string written = network_to_json(m);
  NetworkModel q = parse_network(written, "n.json");
  const auto& bands = q.transports["gloo"]["ring"].bands;
  ASSERT_EQ(bands.size(), 2u);
  EXPECT_EQ(bands[1].min_bytes, 65536);
  EXPECT_EQ(bands[1].max_bytes, 4 << 20);
  EXPECT_DOUBLE_EQ(bands[0].cost.alpha_s, 150e-6);
  EXPECT_DOUBLE_EQ(bands[1].cost.beta_s_per_byte, 8e-9);
  EXPECT_EQ(bands[0].fit.points, 7);
  EXPECT_DOUBLE_EQ(bands[1].fit.max_rel_error, 0.01);
  EXPECT_EQ(network_to_json(q), written);
  nlohmann::json j = nlohmann::json::parse(written);
  j["transports"]["gloo"]["ring"]["bands"][1]["min_bytes"] = 8192;  // overlaps band 0
  EXPECT_NE(error_of([&] {
              parse_network(j.dump(), "n.json");
            }).find("n.json.transports.gloo.ring.bands[1]"),
            std::string::npos);
}

TEST(PlanSchema, PresetsAreMarkedAndComplete) {
  ASSERT_GE(presets().size(), 6u);
  for (const auto& p : presets()) {
    EXPECT_TRUE(p.preset) << p.name;
    EXPECT_NE(p.description.find("preset"), std::string::npos) << p.name;
    EXPECT_FALSE(p.transports.empty()) << p.name;
    NetworkModel round = parse_network(network_to_json(p), p.name);
    EXPECT_TRUE(round.preset);
  }
  EXPECT_EQ(find_preset("eth-10g")->transports.count("gloo"), 1u);
  EXPECT_EQ(find_preset("no-such-net"), nullptr);
  NetworkModel r = resolve_network({"eth-10g"});
  ASSERT_TRUE(r.host.has_value());  // defaults, and says so
  EXPECT_NE(r.description.find("host costs: defaults"), std::string::npos);
  EXPECT_NE(error_of([] { resolve_network({"/no/such/file.json"}); }).find("neither a preset"),
            std::string::npos);
}

TEST(PlanSchema, BadNetworksNameTheField) {
  auto j = nlohmann::json::parse(network_to_json(testing::make_network()));
  j["transports"]["gloo"]["ring"]["alpha_s"] = -1;
  EXPECT_NE(error_of([&] {
              parse_network(j.dump(), "n.json");
            }).find("n.json.transports.gloo.ring.alpha_s: must be a number >= 0"),
            std::string::npos);
  j = nlohmann::json::parse(network_to_json(testing::make_network()));
  j["transports"]["carrier-pigeon"] = nlohmann::json::object();
  EXPECT_NE(error_of([&] { parse_network(j.dump(), "n.json"); }).find("unknown transport"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep::plan
