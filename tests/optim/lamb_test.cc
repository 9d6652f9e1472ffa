// LAMB against a double-precision reference written from the update rule in
// lamb.h with plain loops, and its state surviving torch::save / torch::load.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/optim/lamb.h"

namespace lockstep::optim {
namespace {

struct Ref {
  std::vector<double> x, m, v;
  int64_t t = 0;
};

double norm(const std::vector<double>& a) {
  double s = 0;
  for (double e : a) s += e * e;
  return std::sqrt(s);
}

void reference_step(Ref& r, const std::vector<double>& g, const LambOptions& o) {
  ++r.t;
  double c1 = o.bias_correction() ? 1 - std::pow(o.beta1(), static_cast<double>(r.t)) : 1;
  double c2 = o.bias_correction() ? 1 - std::pow(o.beta2(), static_cast<double>(r.t)) : 1;
  std::vector<double> u(r.x.size());
  for (size_t i = 0; i < r.x.size(); ++i) {
    r.m[i] = o.beta1() * r.m[i] + (1 - o.beta1()) * g[i];
    r.v[i] = o.beta2() * r.v[i] + (1 - o.beta2()) * g[i] * g[i];
    u[i] = (r.m[i] / c1) / (std::sqrt(r.v[i] / c2) + o.eps()) + o.weight_decay() * r.x[i];
  }
  double xn = norm(r.x), un = norm(u);
  double trust = xn > 0 && un > 0 ? xn / un : 1.0;
  if (o.max_trust_ratio() > 0) trust = std::min(trust, o.max_trust_ratio());
  for (size_t i = 0; i < r.x.size(); ++i) r.x[i] -= o.lr() * trust * u[i];
}

std::vector<double> values(const torch::Tensor& t) {
  auto c = t.contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

torch::Tensor gradient(const torch::Tensor& like, int step, int which) {
  auto idx = torch::arange(like.numel(), torch::kFloat64).reshape(like.sizes());
  return torch::cos(idx * (0.5 + 0.25 * which) - step) * (which == 2 ? 0.0 : 1.0);
}

void check_against_reference(LambOptions o) {
  auto weight = torch::linspace(-1, 2, 12, torch::kFloat64).reshape({3, 4}).requires_grad_();
  auto bias = torch::linspace(0.1, 0.4, 4, torch::kFloat64).requires_grad_();
  auto zero_grad = torch::ones({2, 2}, torch::kFloat64).requires_grad_();
  auto zero_weight = torch::zeros({5}, torch::kFloat64).requires_grad_();
  std::vector<torch::Tensor> params = {weight, bias, zero_grad, zero_weight};
  Lamb lamb(params, o);
  std::vector<Ref> ref;
  for (auto& p : params)
    ref.push_back({values(p), std::vector<double>(p.numel()), std::vector<double>(p.numel())});
  for (int step = 0; step < 5; ++step) {
    for (size_t k = 0; k < params.size(); ++k) {
      params[k].mutable_grad() = gradient(params[k], step, static_cast<int>(k));
      reference_step(ref[k], values(params[k].grad()), o);
    }
    lamb.step();
    for (size_t k = 0; k < params.size(); ++k) {
      auto got = values(params[k].detach());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], ref[k].x[i], 1e-12)
            << "step " << step << " tensor " << k << " elem " << i;
    }
  }
}

TEST(Lamb, MatchesReferenceWithBiasCorrectionAndDecay) {
  LambOptions o(0.01);
  o.weight_decay(0.01);
  check_against_reference(o);
}

TEST(Lamb, MatchesReferenceWithoutBiasCorrectionAndWithTrustCap) {
  LambOptions o(0.05);
  o.bias_correction(false).max_trust_ratio(0.5).beta1(0.8);
  check_against_reference(o);
}

TEST(Lamb, StateRoundTripGivesIdenticalContinuation) {
  auto make = [] {
    return torch::linspace(-2, 3, 20, torch::kFloat64).reshape({4, 5}).requires_grad_();
  };
  auto a = make(), b = make();
  LambOptions o(0.01);
  Lamb first({a}, o);
  for (int s = 0; s < 3; ++s) {
    a.mutable_grad() = gradient(a, s, 0);
    first.step();
  }
  std::stringstream saved;
  torch::save(first, saved);
  b.detach().copy_(a.detach());
  Lamb second({b}, o);
  torch::load(second, saved);
  for (int s = 3; s < 6; ++s) {
    a.mutable_grad() = gradient(a, s, 0);
    b.mutable_grad() = gradient(b, s, 0);
    first.step();
    second.step();
  }
  EXPECT_TRUE(torch::equal(a.detach(), b.detach()));
}

TEST(Lamb, InvalidOptionsAreRejectedPerGroup) {
  auto a = torch::ones({2}, torch::kFloat64).requires_grad_();
  LambOptions bad(0.1);
  bad.beta2(1.0);
  EXPECT_THROW(Lamb({a}, bad), InvalidArgument);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a},
                      std::make_unique<LambOptions>(LambOptions(-1.0)));
  EXPECT_THROW(Lamb(std::move(groups), LambOptions(0.1)), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::optim
