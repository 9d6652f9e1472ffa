// LARS against a double-precision reference written from the paper's update
// rule with plain loops, and its state surviving torch::save / torch::load.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/optim/lars.h"

namespace lockstep::optim {
namespace {

struct Ref {
  std::vector<double> w, v;
};

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double e : x) s += e * e;
  return std::sqrt(s);
}

// One LARS step on one tensor, from the formulas in lars.h.
void reference_step(Ref& r, const std::vector<double>& g, const LarsOptions& o, bool adapt) {
  double wn = norm(r.w), gn = norm(g);
  double local =
      adapt && wn > 0 && gn > 0 ? o.trust_coefficient() * wn / (gn + o.weight_decay() * wn) : 1.0;
  for (size_t i = 0; i < r.w.size(); ++i) {
    double d = adapt ? g[i] + o.weight_decay() * r.w[i] : g[i];
    r.v[i] = o.momentum() * r.v[i] + o.lr() * local * d;
    r.w[i] -= r.v[i];
  }
}

std::vector<double> values(const torch::Tensor& t) {
  auto c = t.contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

// Deterministic pseudo-gradients, different per step and tensor.
torch::Tensor gradient(const torch::Tensor& like, int step, int which) {
  auto idx = torch::arange(like.numel(), torch::kFloat64).reshape(like.sizes());
  return torch::sin(idx * (0.7 + 0.3 * which) + step) * (which == 2 ? 0.0 : 1.0);
}

TEST(Lars, MatchesReferenceIncludingZeroNormsAndExcludedBiases) {
  LarsOptions o(0.5);
  o.momentum(0.9).weight_decay(0.01).trust_coefficient(0.02).exclude_1d(true);
  auto weight = torch::linspace(-1, 1, 12, torch::kFloat64).reshape({3, 4}).requires_grad_();
  auto bias = torch::linspace(0.1, 0.4, 4, torch::kFloat64).requires_grad_();
  auto zero_grad = torch::ones({2, 2}, torch::kFloat64).requires_grad_();     // ‖g‖ = 0
  auto zero_weight = torch::zeros({2, 3}, torch::kFloat64).requires_grad_();  // ‖w‖ = 0
  std::vector<torch::Tensor> params = {weight, bias, zero_grad, zero_weight};
  Lars lars(params, o);
  std::vector<Ref> ref;
  for (auto& p : params) ref.push_back({values(p), std::vector<double>(p.numel(), 0)});
  for (int step = 0; step < 4; ++step) {
    for (size_t k = 0; k < params.size(); ++k) {
      params[k].mutable_grad() = gradient(params[k], step, static_cast<int>(k));
      reference_step(ref[k], values(params[k].grad()), o, params[k].dim() > 1);
    }
    lars.step();
    for (size_t k = 0; k < params.size(); ++k) {
      auto got = values(params[k].detach());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], ref[k].w[i], 1e-12)
            << "step " << step << " tensor " << k << " elem " << i;
    }
  }
}

TEST(Lars, StateRoundTripGivesIdenticalContinuation) {
  auto make = [] {
    return torch::linspace(-2, 3, 20, torch::kFloat64).reshape({4, 5}).requires_grad_();
  };
  auto a = make(), b = make();
  LarsOptions o(0.1);
  o.weight_decay(1e-3);
  Lars first({a}, o);
  for (int s = 0; s < 3; ++s) {
    a.mutable_grad() = gradient(a, s, 0);
    first.step();
  }
  std::stringstream saved;
  torch::save(first, saved);
  b.detach().copy_(a.detach());
  Lars second({b}, o);
  torch::load(second, saved);
  for (int s = 3; s < 6; ++s) {
    a.mutable_grad() = gradient(a, s, 0);
    b.mutable_grad() = gradient(b, s, 0);
    first.step();
    second.step();
  }
  EXPECT_TRUE(torch::equal(a.detach(), b.detach()));
}

TEST(Lars, PerGroupOptionsAndValidation) {
  auto a = torch::ones({2, 2}, torch::kFloat64).requires_grad_();
  auto b = torch::ones({2, 2}, torch::kFloat64).requires_grad_();
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a});
  groups.emplace_back(std::vector<torch::Tensor>{b},
                      std::make_unique<LarsOptions>(LarsOptions(0.0)));
  Lars lars(std::move(groups), LarsOptions(1.0));
  a.mutable_grad() = torch::ones_like(a);
  b.mutable_grad() = torch::ones_like(b);
  lars.step();
  EXPECT_FALSE(torch::equal(a.detach(), torch::ones_like(a)));
  EXPECT_TRUE(torch::equal(b.detach(), torch::ones_like(b)));  // lr 0 in its group
  EXPECT_THROW(Lars({a}, LarsOptions(-1.0)), InvalidArgument);
  LarsOptions bad(0.1);
  bad.momentum(1.5);
  EXPECT_THROW(Lars({a}, bad), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::optim
