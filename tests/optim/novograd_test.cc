// NovoGrad against a double-precision reference written from the update rule
// in novograd.h with plain loops, and its state surviving save/load.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/optim/novograd.h"

namespace lockstep::optim {
namespace {

struct Ref {
  std::vector<double> w, m;
  double v = 0, v_max = 0;
  int64_t t = 0;
};

void reference_step(Ref& r, const std::vector<double>& g, const NovoGradOptions& o) {
  ++r.t;
  double sq = 0;
  for (double e : g) sq += e * e;
  r.v = r.t == 1 ? sq : o.beta2() * r.v + (1 - o.beta2()) * sq;
  r.v_max = r.t == 1 ? r.v : std::max(r.v_max, r.v);
  double denom = std::sqrt(o.amsgrad() ? r.v_max : r.v) + o.eps();
  double c = o.grad_averaging() ? 1 - o.beta1() : 1.0;
  for (size_t i = 0; i < g.size(); ++i) {
    double u = g[i] / denom + o.weight_decay() * r.w[i];
    r.m[i] = o.beta1() * r.m[i] + c * u;
    r.w[i] -= o.lr() * r.m[i];
  }
}

std::vector<double> values(const torch::Tensor& t) {
  auto c = t.contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

// Norms shrink after step 2, so amsgrad's running maximum matters.
torch::Tensor gradient(const torch::Tensor& like, int step, int which) {
  auto idx = torch::arange(like.numel(), torch::kFloat64).reshape(like.sizes());
  double scale = which == 2 ? 0.0 : (step < 2 ? 3.0 : 0.5);
  return torch::cos(idx * (0.5 + 0.25 * which) - step) * scale;
}

void check_against_reference(const NovoGradOptions& o) {
  std::vector<torch::Tensor> params = {
      torch::linspace(-1, 2, 12, torch::kFloat64).reshape({3, 4}).requires_grad_(),
      torch::linspace(0.1, 0.4, 4, torch::kFloat64).requires_grad_(),  // 1-D
      torch::ones({2, 2}, torch::kFloat64).requires_grad_(),           // zero gradient
      torch::zeros({5}, torch::kFloat64).requires_grad_()};            // zero weight
  NovoGrad opt(params, o);
  std::vector<Ref> ref;
  for (auto& p : params) ref.push_back({values(p), std::vector<double>(p.numel())});
  for (int step = 0; step < 5; ++step) {
    for (size_t k = 0; k < params.size(); ++k) {
      params[k].mutable_grad() = gradient(params[k], step, static_cast<int>(k));
      reference_step(ref[k], values(params[k].grad()), o);
    }
    opt.step();
    for (size_t k = 0; k < params.size(); ++k) {
      auto got = values(params[k].detach());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], ref[k].w[i], 1e-12)
            << "step " << step << " tensor " << k << " elem " << i;
    }
  }
}

TEST(NovoGrad, MatchesReferenceWithDecay) {
  NovoGradOptions o(0.01);
  o.weight_decay(0.01);
  check_against_reference(o);
}

TEST(NovoGrad, MatchesReferenceWithGradAveragingAndAmsgrad) {
  NovoGradOptions o(0.05);
  o.beta1(0.9).beta2(0.5).weight_decay(0.1).grad_averaging(true).amsgrad(true).eps(1e-6);
  check_against_reference(o);
}

TEST(NovoGrad, FirstStepIsTheNormalisedGradient) {
  // v1 = ‖g‖² exactly (no averaging with zero): w1 = w0 − lr·g/(‖g‖ + ε).
  auto w = torch::zeros({2}, torch::kFloat64).requires_grad_();
  NovoGrad opt({w}, NovoGradOptions(1.0).eps(1e-30));
  w.mutable_grad() = torch::tensor({3.0, 4.0}, torch::kFloat64);
  opt.step();
  EXPECT_NEAR(w[0].item<double>(), -0.6, 1e-15);
  EXPECT_NEAR(w[1].item<double>(), -0.8, 1e-15);
}

TEST(NovoGrad, StateRoundTripGivesIdenticalContinuation) {
  auto make = [] {
    return torch::linspace(-2, 3, 20, torch::kFloat64).reshape({4, 5}).requires_grad_();
  };
  auto a = make(), b = make();
  NovoGradOptions o(0.1);
  o.weight_decay(1e-3).amsgrad(true);
  NovoGrad first({a}, o);
  for (int s = 0; s < 3; ++s) {
    a.mutable_grad() = gradient(a, s, 0);
    first.step();
  }
  std::stringstream saved;
  torch::save(first, saved);
  b.detach().copy_(a.detach());
  NovoGrad second({b}, o);  // torch 1.13 restores state, not group options
  torch::load(second, saved);
  for (int s = 3; s < 6; ++s) {
    a.mutable_grad() = gradient(a, s, 0);
    b.mutable_grad() = gradient(b, s, 0);
    first.step();
    second.step();
  }
  EXPECT_TRUE(torch::equal(a.detach(), b.detach()));
}

TEST(NovoGrad, PerGroupOptionsAndValidation) {
  auto a = torch::ones({2, 2}, torch::kFloat64).requires_grad_();
  auto b = torch::ones({2, 2}, torch::kFloat64).requires_grad_();
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a});
  groups.emplace_back(std::vector<torch::Tensor>{b},
                      std::make_unique<NovoGradOptions>(NovoGradOptions(0.0)));
  NovoGrad opt(std::move(groups), NovoGradOptions(1.0));
  a.mutable_grad() = torch::ones_like(a);
  b.mutable_grad() = torch::ones_like(b);
  opt.step();
  EXPECT_FALSE(torch::equal(a.detach(), torch::ones_like(a)));
  EXPECT_TRUE(torch::equal(b.detach(), torch::ones_like(b)));
  EXPECT_THROW(NovoGrad({a}, NovoGradOptions(-1.0)), InvalidArgument);
  EXPECT_THROW(NovoGrad({a}, NovoGradOptions(0.1).beta2(1.0)), InvalidArgument);
  EXPECT_THROW(NovoGrad({a}, NovoGradOptions(0.1).eps(0)), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::optim
