// Least-squares fits recover known costs; the zoo's published-model
// profiles have the models' real sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "lockstep/base/error.h"
#include "lockstep/plan/cost.h"
#include "lockstep/plan/fit.h"
#include "lockstep/plan/zoo.h"

namespace lockstep::plan {
namespace {

TEST(PlanFit, LineFitRecoversSlopeAndIntercept) {
  std::vector<std::pair<double, double>> xy;
  for (double x = 1e3; x <= 1e8; x *= 4) xy.push_back({x, 5e-6 + 2e-10 * x});
  LineFit f = fit_line(xy);
  EXPECT_NEAR(f.intercept, 5e-6, 1e-12);
  EXPECT_NEAR(f.slope, 2e-10, 1e-16);
  EXPECT_LT(f.rms_rel_error, 1e-9);
  EXPECT_THROW(fit_line({{1, 1}}), InvalidArgument);
}

TEST(PlanFit, NetworkFitRecoversAlphaBetaPerAlgorithm) {
  const HostModel host{.gamma_s_per_byte = 3e-10, .copy_s_per_byte = 1e-10, .cycle_overhead_s = 0};
  NetworkModel truth;
  truth.host = host;
  truth.transports["shm"]["one_step"].cost = {0.8e-6, 1.5e-10};
  truth.transports["shm"]["two_step"].cost = {1.2e-6, 2.5e-10};
  truth.transports["gloo"]["ring"].cost = {40e-6, 8e-9};
  std::vector<Sample> samples;
  for (int np : {2, 3})
    for (double b = 4; b <= 16 << 20; b *= 4) {
      for (const char* t : {"shm", "gloo"}) {
        std::string algo = algorithm_for(truth, t, np, b);
        double s = apply(coefficients(truth, t, algo, np, b), truth.cost(t, algo, b),
                         host.gamma_s_per_byte)
                       .total();
        // +-2% measurement noise, alternating.
        samples.push_back({t, np, int64_t(b), s * (samples.size() % 2 ? 1.02 : 0.98)});
      }
    }
  NetworkModel fitted = fit_network(samples, host, NetworkModel{});
  for (const auto& [t, algos] : truth.transports)
    for (const auto& [a, m] : algos) {
      SCOPED_TRACE(t + " " + a);
      // 2% noise is a line the fit follows: no bands.
      EXPECT_TRUE(fitted.transports[t][a].bands.empty());
      const auto& got = fitted.transports[t][a].cost;
      // 2% noise on totals that the reduction term dominates at small sizes
      // moves the parameters more than the predictions.
      EXPECT_NEAR(got.alpha_s, m.cost.alpha_s, 0.15 * m.cost.alpha_s);
      EXPECT_NEAR(got.beta_s_per_byte, m.cost.beta_s_per_byte, 0.15 * m.cost.beta_s_per_byte);
      EXPECT_LT(fitted.transports[t][a].fit.rms_rel_error, 0.03);
    }
  EXPECT_EQ(fitted.points.size(), samples.size());
}

TEST(PlanFit, TooFewSizesIsAnError) {
  std::vector<Sample> one = {{"gloo", 2, 1024, 1e-4}};
  EXPECT_THROW(fit_network(one, HostModel{}, NetworkModel{}), InvalidArgument);
}

// Gloo ring samples among 2 ranks at 4 B, 16 B, ..., 4 MiB (11 sizes) whose
// time is `t(B)` plus the reduction (the ring's B/2 bytes at gamma).
constexpr double kGamma = 3e-10;
std::vector<Sample> gloo_sweep(const std::function<double(double)>& t) {
  std::vector<Sample> out;
  for (double b = 4; b <= 4 << 20; b *= 4)
    out.push_back({"gloo", 2, int64_t(b), t(b) + ring(2, b).reduced * kGamma});
  return out;
}

NetworkModel fit_gloo(const std::vector<Sample>& samples, BandRule rule = {}) {
  return fit_network(samples, HostModel{.gamma_s_per_byte = kGamma}, NetworkModel{}, rule);
}

double max_residual(const NetworkModel& m) {
  double worst = 0;
  for (const auto& p : m.points)
    worst = std::max(worst, std::fabs(p.fitted_s - p.measured_s) / p.measured_s);
  return worst;
}

TEST(PlanFitBands, RecoversTwoLinesAndTheirKnot) {
  // Ring among 2: 2 steps and B bytes. Up to 16 KiB a slow line (150 us per
  // step, 20 ns/B), from 64 KiB the wire's (10 us, 8 ns/B).
  auto t = [](double b) { return b <= 16384 ? 2 * 150e-6 + 2e-8 * b : 2 * 10e-6 + 8e-9 * b; };
  NetworkModel m = fit_gloo(gloo_sweep(t));
  const AlgorithmModel& a = m.transports["gloo"]["ring"];
  EXPECT_GT(a.fit.max_rel_error, 0.10)
      << "one line must miss these points, or the test proves nothing";
  ASSERT_EQ(a.bands.size(), 2u);
  EXPECT_EQ(a.bands[0].min_bytes, 4);
  EXPECT_EQ(a.bands[0].max_bytes, 16384);
  EXPECT_EQ(a.bands[1].min_bytes, 65536);
  EXPECT_EQ(a.bands[1].max_bytes, 4 << 20);
  EXPECT_NEAR(a.bands[0].cost.alpha_s, 150e-6, 1e-6 * 150e-6);
  EXPECT_NEAR(a.bands[0].cost.beta_s_per_byte, 2e-8, 1e-6 * 2e-8);
  EXPECT_NEAR(a.bands[1].cost.alpha_s, 10e-6, 1e-6 * 10e-6);
  EXPECT_NEAR(a.bands[1].cost.beta_s_per_byte, 8e-9, 1e-6 * 8e-9);
  EXPECT_EQ(a.bands[0].fit.points, 7);
  EXPECT_EQ(a.bands[1].fit.points, 4);
  EXPECT_LT(max_residual(m), 1e-9);
}

TEST(PlanFitBands, CleanLineIsNotSplit) {
  // One line with +-4% alternating noise: within the 10% that splits.
  int i = 0;
  auto t = [&](double b) { return (2 * 40e-6 + 8e-9 * b) * (i++ % 2 ? 1.04 : 0.96); };
  NetworkModel m = fit_gloo(gloo_sweep(t));
  const AlgorithmModel& a = m.transports["gloo"]["ring"];
  EXPECT_TRUE(a.bands.empty()) << a.bands.size() << " bands";
  EXPECT_NEAR(a.cost.alpha_s, 40e-6, 0.1 * 40e-6);
  EXPECT_NEAR(a.cost.beta_s_per_byte, 8e-9, 0.1 * 8e-9);
  EXPECT_LT(a.fit.max_rel_error, 0.10);
}

TEST(PlanFitBands, FollowsABentSweepAtEveryPoint) {
  // A per-message overhead that grows to 400 us by ~32 KiB (as TCP's
  // window opening does) on a 60 us / 8 ns/B line: no straight line.
  auto t = [](double b) { return 2 * 60e-6 + 8e-9 * b + 400e-6 * (1 - std::exp(-b / 8192)); };
  const std::vector<Sample> sweep = gloo_sweep(t);
  NetworkModel line = fit_gloo(sweep, BandRule{.max_bands = 0});
  EXPECT_TRUE(line.transports["gloo"]["ring"].bands.empty());
  EXPECT_GT(max_residual(line), 0.40);
  NetworkModel m = fit_gloo(sweep);
  EXPECT_FALSE(m.transports["gloo"]["ring"].bands.empty());
  ASSERT_EQ(m.points.size(), sweep.size());
  for (const auto& p : m.points)
    EXPECT_LT(std::fabs(p.fitted_s - p.measured_s) / p.measured_s, 0.05) << p.bytes << " B";
  // The model's cost at each measured size is the point's fitted time.
  for (const auto& p : m.points)
    EXPECT_NEAR(
        apply(ring(2, double(p.bytes)), m.cost("gloo", "ring", double(p.bytes)), kGamma).total(),
        p.fitted_s, 1e-15);
}

TEST(PlanFitBands, TooFewSizesForTwoBandsKeepTheLine) {
  // 5 sizes cannot make two bands of 3: the least-squares line stays,
  // however bent.
  std::vector<Sample> s;
  for (double b : {4.0, 64.0, 1024.0, 16384.0, 262144.0})
    s.push_back({"gloo", 2, int64_t(b), b < 2000 ? 1e-3 : 1e-5 + 1e-8 * b});
  NetworkModel m = fit_gloo(s);
  const AlgorithmModel& a = m.transports["gloo"]["ring"];
  EXPECT_GT(a.fit.max_rel_error, 0.10);
  EXPECT_TRUE(a.bands.empty());
  // One more size makes two bands of 3.
  s.push_back({"gloo", 2, 1 << 20, 1e-5 + 1e-8 * (1 << 20)});
  EXPECT_EQ(fit_gloo(s).transports["gloo"]["ring"].bands.size(), 2u);
}

TEST(PlanZoo, PublishedModelsHaveTheirRealSizes) {
  ZooOptions o{.images_per_s = 100, .batch = 64};
  Profile r50 = zoo_profile("resnet50", o);
  ProfileSummary s = summarize(r50);
  EXPECT_EQ(s.gradient_count, 161u);
  EXPECT_EQ(s.gradient_bytes, 4 * 25'557'032);
  EXPECT_NEAR(s.step_ms, 640, 1e-9);
  Profile r101 = zoo_profile("resnet101", o);
  EXPECT_EQ(summarize(r101).gradient_bytes, 4 * 44'549'160);
  Profile vgg = zoo_profile("vgg16", o);
  EXPECT_EQ(summarize(vgg).gradient_bytes, 4 * 138'357'544);
  // Backward runs last layer first: the classifier is ready before conv1.
  EXPECT_LT(vgg.gradients.back().ready_ms, vgg.gradients.front().ready_ms);
  EXPECT_NEAR(vgg.gradients.front().ready_ms, summarize(vgg).backward_ms, 1e-9);
  EXPECT_THROW(zoo_profile("alexnet", o), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::plan
