// Least-squares fits recover known costs; the zoo's published-model
// profiles have the models' real sizes.
#include <gtest/gtest.h>

#include <cmath>

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
        double s = apply(coefficients(truth, t, algo, np, b), truth.cost(t, algo),
                         host.gamma_s_per_byte).total();
        // +-2% measurement noise, alternating.
        samples.push_back({t, np, int64_t(b), s * (samples.size() % 2 ? 1.02 : 0.98)});
      }
    }
  NetworkModel fitted = fit_network(samples, host, NetworkModel{});
  for (const auto& [t, algos] : truth.transports)
    for (const auto& [a, m] : algos) {
      SCOPED_TRACE(t + " " + a);
      const auto& got = fitted.cost(t, a);
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
