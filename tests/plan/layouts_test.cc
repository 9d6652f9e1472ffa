// Layouts of one host (plan/layouts.h): predictions against step times
// worked out by hand from Note [Layout model], the recommendation moving
// from many threads to many workers as the serial fraction grows or as
// communication gets cheaper, and the runtime's placement and overlap rules
// deciding what the planner predicts.
#include <gtest/gtest.h>

#include <functional>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/plan/layouts.h"
#include "lockstep/policy/policies.h"

namespace lockstep::plan {
namespace {

using namespace lockstep::policy;  // the decisions under test

// One worker at 1 thread alone: every step 100 ms (30 forward, 60 backward,
// 10 optimizer), 64 samples; one 1 KiB gradient ready `ready_ms` into
// backward. No spread, so no straggler term.
Profile lone_profile(double ready_ms = 60) {
  Profile p;
  p.intra_op_threads = 1;
  p.local_size = 1;
  for (int i = 0; i < 5; ++i) p.steps.push_back({100, 30, 60, 0, 10, 64});
  p.gradients.push_back({"w", 1024, "f32", ready_ms, {}});
  return p;
}

// Shared memory where an allreduce costs alpha and nothing else: a step at
// N > 1 ranks without overlap pays one negotiation cycle and one allreduce
// (both one_step: (N-1) x 1 KiB stays under the 16 KiB cut-off), 2 alpha.
NetworkModel alpha_only(double alpha_s) {
  NetworkModel m;
  m.name = "alpha-only";
  m.host = HostModel{.gamma_s_per_byte = 0, .copy_s_per_byte = 0, .cycle_overhead_s = 0};
  m.transports["shm"]["one_step"].cost = {alpha_s, 0};
  m.transports["shm"]["two_step"].cost = {alpha_s, 0};
  return m;
}

LayoutQuery query(int cpus, double s, double k, std::vector<Layout> layouts = {}) {
  LayoutQuery q;
  q.host_cpus = cpus;
  q.scaling = {s, k, "test"};
  q.scenario.jitter_ms = 0;
  q.layouts = std::move(layouts);
  return q;
}

const LayoutPrediction& find(const std::vector<LayoutPrediction>& ranked, Layout l) {
  for (const auto& p : ranked)
    if (p.layout == l) return p;
  throw std::runtime_error("layout " + l.name() + " not ranked");
}

// s = 0.2, k = 0.05 on 8 CPUs, alpha 1 ms; compute = 100 (0.2 + 0.8/T)(1 + 0.05(N-1)):
//   1x8: 100 x 0.3 x 1    = 30 ms, alone          -> 30 ms,   64 / 0.030 = 2133.3/s
//   2x4: 100 x 0.4 x 1.05 = 42 ms, + 2 ms of comm -> 44 ms,  128 / 0.044 = 2909.1/s
//   4x2: 100 x 0.6 x 1.15 = 69 ms, + 2            -> 71 ms,  256 / 0.071 = 3605.6/s
//   8x1: 100 x 1.0 x 1.35 = 135 ms, + 2           -> 137 ms, 512 / 0.137 = 3737.2/s
TEST(PlanLayouts, StepTimesMatchTheModelWorkedByHand) {
  const auto ranked = rank_layouts(lone_profile(), alpha_only(1e-3),
                                   query(8, 0.2, 0.05, {{1, 8}, {2, 4}, {4, 2}, {8, 1}}));
  ASSERT_EQ(ranked.size(), 4u);
  const std::vector<std::pair<Layout, double>> expected = {
      {{8, 1}, 137}, {{4, 2}, 71}, {{2, 4}, 44}, {{1, 8}, 30}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [layout, step_ms] = expected[i];
    SCOPED_TRACE(layout.name());
    EXPECT_EQ(ranked[i].layout, layout);  // fastest first
    EXPECT_NEAR(ranked[i].step.step_ms, step_ms, 1e-9);
    EXPECT_NEAR(ranked[i].step.samples_per_s, 64.0 * layout.workers / (step_ms / 1e3), 1e-6);
    EXPECT_FALSE(ranked[i].step.overlap);  // T = the worker's CPUs: no spare core
  }
  EXPECT_NEAR(ranked[0].ratio_to_best, 1.0, 1e-12);
  EXPECT_NEAR(find(ranked, {1, 8}).ratio_to_best, (64 / 0.030) / (512 / 0.137), 1e-9);
  EXPECT_NEAR(find(ranked, {4, 2}).compute_scale, 0.69, 1e-12);
  EXPECT_EQ(find(ranked, {2, 4}).step.comm_shares_cores, true);
  EXPECT_EQ(find(ranked, {1, 8}).step.collectives, 0);
}

int recommended_workers(double s, double alpha_s) {
  return rank_layouts(lone_profile(), alpha_only(alpha_s), query(8, s, 0)).front().layout.workers;
}

// Perfect thread scaling leaves nothing for more workers to win and their
// allreduce to pay; a serial step is what more workers parallelise.
TEST(PlanLayouts, RecommendationMovesToMoreWorkersAsTheSerialFractionGrows) {
  EXPECT_EQ(recommended_workers(0.0, 1e-3), 1);
  EXPECT_EQ(recommended_workers(1.0, 1e-3), 8);
  int last = 1;
  for (int i = 0; i <= 20; ++i) {
    const double s = i / 20.0;
    const int workers = recommended_workers(s, 1e-3);
    EXPECT_GE(workers, last) << "serial fraction " << s;
    last = workers;
  }
}

// s = 0.1: 1x8 computes 21.25 ms (3012/s); 8x1 computes 100 ms, and beats it
// only while its allreduces cost less than ~70 ms.
TEST(PlanLayouts, RecommendationMovesToMoreWorkersAsCommunicationGetsCheaper) {
  EXPECT_EQ(recommended_workers(0.1, 0.1), 1);  // 2 x 100 ms of allreduce
  EXPECT_EQ(recommended_workers(0.1, 0.0), 8);  // free allreduce
  int last = 1;
  for (double alpha : {0.1, 0.05, 0.02, 0.01, 1e-3, 1e-4, 0.0}) {
    const int workers = recommended_workers(0.1, alpha);
    EXPECT_GE(workers, last) << "alpha " << alpha;
    last = workers;
  }
}

// Layout 2x3 (s = 1: compute 100 ms either way; the gradient ready 10 ms
// into backward, 2 ms of communication): on 8 CPUs each worker has 4 and a
// core to spare, so overlap pays and hides the communication (100 ms); on
// 6 CPUs it has none, so the allreduce waits for backward (102 ms).
TEST(PlanLayouts, OverlapFollowsTheRuntimesRuleForTheLayoutsCores) {
  const Layout l{2, 3};
  for (int cpus : {6, 8}) {
    SCOPED_TRACE(fmt::format("{} CPUs", cpus));
    const bool pays = overlap_pays(true, worker_cpus(cpus, l.workers), l.threads);
    ASSERT_EQ(pays, cpus == 8);
    const auto p = predict_layout(lone_profile(10), alpha_only(1e-3), query(cpus, 1, 0), l);
    EXPECT_EQ(p.step.overlap, pays);
    EXPECT_EQ(p.step.comm_shares_cores, !pays);
    EXPECT_NEAR(p.step.step_ms, pays ? 100 : 102, 1e-9);
  }
  LayoutQuery forced = query(8, 1, 0);
  forced.scenario.overlap = "off";  // LOCKSTEP_OVERLAP=off wins over the rule
  EXPECT_NEAR(predict_layout(lone_profile(10), alpha_only(1e-3), forced, l).step.step_ms, 102,
              1e-9);
}

TEST(PlanLayouts, PlacementLayoutsAreWhatThePlacementGives) {
  const auto layouts = placement_layouts(16);
  ASSERT_EQ(layouts.size(), 16u);
  for (int n = 1; n <= 16; ++n) EXPECT_EQ(layouts[n - 1], (Layout{n, worker_cpus(16, n)}));
  EXPECT_EQ(layouts[2], (Layout{3, 5}));  // 15 of 16 CPUs
  EXPECT_EQ(layouts[8], (Layout{9, 1}));
  EXPECT_EQ(placement_layouts(1), (std::vector<Layout>{{1, 1}}));
  // Without a list, every placement layout is ranked.
  EXPECT_EQ(rank_layouts(lone_profile(), alpha_only(1e-3), query(4, 0.2, 0)).size(), 4u);
}

TEST(PlanLayouts, SerialFractionAndContentionFitsMatchHandValues) {
  EXPECT_NEAR(fit_serial_fraction(100, 1, 40, 4), 0.2, 1e-12);    // 2.5x on 4 threads
  EXPECT_NEAR(fit_serial_fraction(40, 4, 100, 1), 0.2, 1e-12);    // either order
  EXPECT_NEAR(fit_serial_fraction(55, 2, 21.25, 8), 0.1, 1e-12);  // neither at 1 thread
  EXPECT_EQ(fit_serial_fraction(100, 1, 10, 8), 0.0);             // better than linear
  EXPECT_NEAR(fit_serial_fraction(100, 1, 120, 2), 1.4, 1e-12);   // slower: A(2) = 1.2
  EXPECT_NEAR(amdahl_time(1.4, 2), 1.2, 1e-12);
  EXPECT_NEAR(fit_contention(100, 135, 8), 0.05, 1e-12);
  EXPECT_EQ(fit_contention(100, 90, 2), 0.0);
  EXPECT_NEAR(amdahl_time(0.2, 4), 0.4, 1e-12);
  EXPECT_THROW(fit_serial_fraction(100, 2, 50, 2), InvalidArgument);
  // From 2 threads the model slows down at most (1 - 1/4) / (1 - 1/2) = 1.5x by 4.
  EXPECT_NEAR(fit_serial_fraction(15, 2, 17.5, 4), 2.0, 1e-12);  // s = 2: A(2) 1.5, A(4) 1.75
  EXPECT_THROW(fit_serial_fraction(10, 2, 30, 4), InvalidArgument);
  EXPECT_THROW(fit_contention(100, 120, 1), InvalidArgument);
}

// A profile recorded at 2 workers x 2 threads already holds A(2) and K(2).
TEST(PlanLayouts, ComputeScaleDividesOutTheProfilesOwnLayout) {
  Profile p = lone_profile();
  p.intra_op_threads = 2;
  p.local_size = 2;
  const ThreadScaling sc{0.2, 0.1, "test"};
  EXPECT_NEAR(compute_scale(sc, p, {2, 2}), 1.0, 1e-12);
  EXPECT_NEAR(compute_scale(sc, p, {1, 1}), 1.0 / (0.6 * 1.1), 1e-12);
  EXPECT_NEAR(compute_scale(sc, p, {4, 1}), 1.3 / (0.6 * 1.1), 1e-12);
  const Profile scaled = scale_profile(lone_profile(10), 1.5);
  EXPECT_NEAR(summarize(scaled).compute_ms, 150, 1e-12);
  EXPECT_NEAR(scaled.gradients[0].ready_ms, 15, 1e-12);
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; wanted one containing: " << part;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(PlanLayouts, BadInputIsNamed) {
  const Profile p = lone_profile();
  expect_error(
      [&] {
        predict_layout(p, alpha_only(1e-3), query(8, 0.2, 0), {4, 4});
      },
      "layout 4x4 needs 16 CPUs but the host has 8");
  NetworkModel no_shm = alpha_only(1e-3);
  no_shm.transports.clear();
  expect_error([&] { predict_layout(p, no_shm, query(8, 0.2, 0), {2, 4}); }, "no shm costs");
  EXPECT_NO_THROW(predict_layout(p, no_shm, query(8, 0.2, 0), {1, 8}));  // one worker: none needed
  expect_error(
      [&] {
        predict_layout(p, alpha_only(1e-3), query(8, -0.5, 0), {1, 8});
      },
      "serial fraction -0.5 must be >= 0");
  expect_error([&] { parse_layouts("2x8,4x", "--layouts"); }, "'4x' is not WORKERSxTHREADS");
  expect_error([&] { parse_layouts("2x8x1", "--layouts"); }, "'2x8x1'");
  EXPECT_EQ(parse_layouts("1x16,2x8", "--layouts"), (std::vector<Layout>{{1, 16}, {2, 8}}));
}

}  // namespace
}  // namespace lockstep::plan
