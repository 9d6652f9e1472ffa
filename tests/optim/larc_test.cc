// LARC around torch::optim::SGD against a double-precision reference written
// from the apex rule and SGD's momentum formula with plain loops.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/optim/lamb.h"
#include "lockstep/optim/larc.h"
#include "lockstep/optim/novograd.h"

namespace lockstep::optim {
namespace {

constexpr double kLr = 0.1, kMomentum = 0.9, kDecay = 0.01;

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double e : x) s += e * e;
  return std::sqrt(s);
}

std::vector<double> values(const torch::Tensor& t) {
  auto c = t.contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

struct Ref {
  std::vector<double> w, buf;
  bool has_buf = false;
};

// apex LARC, then torch SGD (dampening 0, no nesterov, its decay zeroed).
void reference_step(Ref& r, std::vector<double> g, const LarcOptions& o) {
  double wn = norm(r.w), gn = norm(g);
  if (wn > 0 && gn > 0) {
    double a = o.trust_coefficient * wn / (gn + kDecay * wn + o.eps);
    if (o.clip) a = std::min(a / kLr, 1.0);
    for (size_t i = 0; i < g.size(); ++i) g[i] = (g[i] + kDecay * r.w[i]) * a;
  }
  for (size_t i = 0; i < g.size(); ++i) {
    r.buf[i] = r.has_buf ? kMomentum * r.buf[i] + g[i] : g[i];
    r.w[i] -= kLr * r.buf[i];
  }
  r.has_buf = true;
}

// Tensor 2's gradient is zero; tensor 4's is tiny against large weights,
// so clip mode clips it (a/lr > 1) while the others stay below 1.
torch::Tensor gradient(const torch::Tensor& like, int step, int which) {
  auto idx = torch::arange(like.numel(), torch::kFloat64).reshape(like.sizes());
  double scale = which == 2 ? 0.0 : which == 4 ? 1e-3 : 1.0;
  return torch::sin(idx * (0.7 + 0.3 * which) + step) * scale;
}

std::vector<torch::Tensor> make_params() {
  return {torch::linspace(-1, 1, 12, torch::kFloat64).reshape({3, 4}).requires_grad_(),
          torch::linspace(0.1, 0.4, 4, torch::kFloat64).requires_grad_(),
          torch::ones({2, 2}, torch::kFloat64).requires_grad_(),
          torch::zeros({2, 3}, torch::kFloat64).requires_grad_(),
          torch::full({2, 3}, 5.0, torch::kFloat64).requires_grad_()};
}

std::shared_ptr<torch::optim::SGD> make_sgd(std::vector<torch::Tensor> params) {
  return std::make_shared<torch::optim::SGD>(
      params, torch::optim::SGDOptions(kLr).momentum(kMomentum).weight_decay(kDecay));
}

void check_against_reference(const LarcOptions& o) {
  auto params = make_params();
  auto sgd = make_sgd(params);
  Larc larc(sgd, o);
  std::vector<Ref> ref;
  for (auto& p : params) ref.push_back({values(p), std::vector<double>(p.numel()), false});
  for (int step = 0; step < 4; ++step) {
    for (size_t k = 0; k < params.size(); ++k) {
      params[k].mutable_grad() = gradient(params[k], step, static_cast<int>(k));
      reference_step(ref[k], values(params[k].grad()), o);
    }
    larc.step();
    for (size_t k = 0; k < params.size(); ++k) {
      auto got = values(params[k].detach());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], ref[k].w[i], 1e-12)
            << "step " << step << " tensor " << k << " elem " << i;
    }
    // The decay is suspended only during the inner step.
    auto& sgd_options = static_cast<torch::optim::SGDOptions&>(sgd->param_groups()[0].options());
    ASSERT_EQ(sgd_options.weight_decay(), kDecay);
  }
}

TEST(Larc, ClipModeMatchesReference) { check_against_reference({}); }

TEST(Larc, ScaleModeMatchesReference) {
  LarcOptions o;
  o.clip = false;
  o.trust_coefficient = 0.05;
  check_against_reference(o);
}

TEST(Larc, ClipAndScaleDifferOnlyByTheLrCap) {
  // One tensor whose local rate η‖w‖/‖g‖ far exceeds lr: clip caps the
  // factor at 1 (a plain SGD step), scale multiplies lr by it.
  auto run = [](bool clip) {
    auto w = torch::full({4}, 10.0, torch::kFloat64).requires_grad_();
    Larc larc(std::make_shared<torch::optim::SGD>(std::vector<torch::Tensor>{w},
                                                  torch::optim::SGDOptions(kLr)),
              LarcOptions{.trust_coefficient = 0.02, .clip = clip, .eps = 0});
    w.mutable_grad() = torch::full({4}, 1e-3, torch::kFloat64);
    larc.step();
    return 10.0 - w.detach()[0].item<double>();
  };
  // ‖w‖ = 20, ‖g‖ = 2e-3: a = 0.02·20/2e-3 = 200.
  EXPECT_NEAR(run(true), kLr * 1e-3, 1e-15);
  EXPECT_NEAR(run(false), kLr * 200 * 1e-3, 1e-12);
}

TEST(Larc, StateRoundTripThroughTheInnerOptimizer) {
  auto a = make_params(), b = make_params();
  Larc first(make_sgd(a), {});
  auto feed = [](std::vector<torch::Tensor>& ps, int s) {
    for (size_t k = 0; k < ps.size(); ++k)
      ps[k].mutable_grad() = gradient(ps[k], s, static_cast<int>(k));
  };
  for (int s = 0; s < 3; ++s) {
    feed(a, s);
    first.step();
  }
  std::stringstream saved;
  torch::save(first, saved);
  for (size_t k = 0; k < a.size(); ++k) b[k].detach().copy_(a[k].detach());
  Larc second(make_sgd(b), {});
  torch::load(second, saved);
  for (int s = 3; s < 6; ++s) {
    feed(a, s);
    feed(b, s);
    first.step();
    second.step();
  }
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_TRUE(torch::equal(a[k].detach(), b[k].detach())) << k;
}

TEST(Larc, ReadsDecayOfKnownOptionTypesAndValidates) {
  EXPECT_EQ(group_weight_decay(torch::optim::AdamWOptions().weight_decay(0.5)), 0.5);
  EXPECT_EQ(group_weight_decay(torch::optim::AdamOptions().weight_decay(0.25)), 0.25);
  EXPECT_EQ(group_weight_decay(LambOptions().weight_decay(0.125)), 0.125);
  EXPECT_EQ(group_weight_decay(NovoGradOptions().weight_decay(2)), 2.0);
  EXPECT_FALSE(group_weight_decay(torch::optim::LBFGSOptions()).has_value());
  EXPECT_THROW(Larc(nullptr), InvalidArgument);
  auto w = torch::ones({2}, torch::kFloat64).requires_grad_();
  auto sgd = make_sgd({w});
  EXPECT_THROW(Larc(sgd, LarcOptions{.trust_coefficient = 0}), InvalidArgument);
}

// A plain gradient step whose options type LARC does not know.
struct PlainOptions : torch::optim::OptimizerCloneableOptions<PlainOptions> {
  double lr = kLr, decay = kDecay;
  double get_lr() const override { return lr; }
  void set_lr(double v) override { lr = v; }
};

struct Plain : torch::optim::Optimizer {
  explicit Plain(std::vector<torch::Tensor> params)
      : Optimizer(std::move(params), std::make_unique<PlainOptions>()) {}
  torch::Tensor step(LossClosure = nullptr) override {
    torch::NoGradGuard no_grad;
    for (auto& g : param_groups()) {
      auto& o = static_cast<PlainOptions&>(g.options());
      for (auto& p : g.params()) p.add_(p.grad() + o.decay * p, -o.lr);
    }
    return {};
  }
};

// The silent trap: an optimizer missing from LARC's type list had its weight
// decay taken as 0 without a word. Now it is refused (naming the type), or
// LARC uses the accessors it is given and matches LARC over SGD.
TEST(Larc, RefusesAnOptimizerWhoseWeightDecayItCannotRead) {
  auto a = make_params();
  try {
    Larc refused(std::make_shared<Plain>(a));
    ADD_FAILURE() << "an optimizer with unknown options was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("PlainOptions"), std::string::npos) << e.what();
  }
  LarcOptions o{
      .weight_decay_of = [](const auto& g) { return static_cast<const PlainOptions&>(g).decay; },
      .set_weight_decay = [](auto& g, double wd) { static_cast<PlainOptions&>(g).decay = wd; }};
  Larc with_plain(std::make_shared<Plain>(a), o);
  auto b = make_params();
  Larc with_sgd(
      std::make_shared<torch::optim::SGD>(b, torch::optim::SGDOptions(kLr).weight_decay(kDecay)));
  for (int s = 0; s < 3; ++s) {
    for (size_t k = 0; k < a.size(); ++k) {
      a[k].mutable_grad() = gradient(a[k], s, static_cast<int>(k));
      b[k].mutable_grad() = gradient(b[k], s, static_cast<int>(k));
    }
    with_plain.step();
    with_sgd.step();
  }
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_TRUE(torch::allclose(a[k].detach(), b[k].detach(), 0, 1e-15)) << k;
  EXPECT_THROW(Larc(std::make_shared<Plain>(make_params()),
                    LarcOptions{.weight_decay_of = o.weight_decay_of}),
               InvalidArgument);
}

// Larc is a torch::optim::Optimizer whose groups drive the inner one: a rate
// set on the Larc is the one used, the decay is applied once (inside the
// adapted gradient, not again by the inner step), and a group added to the
// Larc reaches the inner optimizer.
TEST(Larc, IsAnOptimizerWhoseGroupsDriveTheInner) {
  auto w = torch::full({3}, 2.0, torch::kFloat64).requires_grad_();
  auto sgd = std::make_shared<torch::optim::SGD>(
      std::vector<torch::Tensor>{w}, torch::optim::SGDOptions(kLr).weight_decay(kDecay));
  Larc larc(sgd, {.trust_coefficient = 1e6});  // clip: the factor is 1, g ← g + wd·w
  torch::optim::Optimizer& as_optimizer = larc;
  as_optimizer.param_groups()[0].options().set_lr(0.05);
  w.mutable_grad() = torch::ones({3}, torch::kFloat64);
  as_optimizer.step();
  EXPECT_TRUE(torch::allclose(w.detach(),
                              torch::full({3}, 2.0 - 0.05 * (1 + kDecay * 2.0), torch::kFloat64)));
  EXPECT_EQ(group_weight_decay(sgd->param_groups()[0].options()), kDecay);  // restored
  EXPECT_EQ(group_weight_decay(larc.param_groups()[0].options()), kDecay);
  auto v = torch::ones({2}, torch::kFloat64).requires_grad_();
  larc.add_param_group(
      torch::optim::OptimizerParamGroup({v}, std::make_unique<torch::optim::SGDOptions>(0.5)));
  v.mutable_grad() = torch::ones({2}, torch::kFloat64);
  w.mutable_grad() = torch::zeros({3}, torch::kFloat64);
  larc.step();
  ASSERT_EQ(sgd->param_groups().size(), 2u);
  EXPECT_TRUE(torch::allclose(v.detach(), torch::full({2}, 0.5, torch::kFloat64)));
}

}  // namespace
}  // namespace lockstep::optim
