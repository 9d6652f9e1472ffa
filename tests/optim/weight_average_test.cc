// WeightEma and Lookahead against references computed by hand in doubles.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>

#include "lockstep/base/error.h"
#include "lockstep/optim/weight_average.h"

namespace lockstep::optim {
namespace {

// A linear layer and a BatchNorm: parameters, float buffers and the integer
// num_batches_tracked.
struct NetImpl : ::torch::nn::Module {
  NetImpl() {
    fc = register_module("fc", ::torch::nn::Linear(3, 2));
    bn = register_module("bn", ::torch::nn::BatchNorm1d(2));
  }
  ::torch::Tensor forward(const ::torch::Tensor& x) { return bn->forward(fc->forward(x)); }
  ::torch::nn::Linear fc{nullptr};
  ::torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Net);

void set_all(Net& net, double v) {
  ::torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.fill_(v);
  net->bn->running_mean.fill_(v);
  net->bn->running_var.fill_(v);
}

TEST(WeightEma, FollowsTheRecurrenceWithWarmup) {
  Net net;
  set_all(net, 1.0);
  WeightEma ema(*net, {.decay = 0.9, .warmup = true});
  double avg = 1.0;
  for (int t = 1; t <= 30; ++t) {
    const double w = std::sin(t);  // the weights move every step
    set_all(net, w);
    net->bn->num_batches_tracked.fill_(t);
    const double d = std::min(0.9, (1.0 + t) / (10.0 + t));
    EXPECT_DOUBLE_EQ(ema.next_decay(), d);
    ema.update(*net);
    avg = d * avg + (1 - d) * w;
  }
  EXPECT_EQ(ema.updates(), 30);
  set_all(net, 7.0);
  {
    auto applied = ema.apply_to(*net);
    for (auto& p : net->parameters()) EXPECT_NEAR(p.min().item<double>(), avg, 1e-6);
    EXPECT_NEAR(net->bn->running_var.max().item<double>(), avg, 1e-6);
    EXPECT_EQ(net->bn->num_batches_tracked.item<int64_t>(), 30);  // copied, not averaged
  }
  // Swapped back exactly.
  for (auto& p : net->parameters()) EXPECT_EQ(p.max().item<double>(), 7.0);
  EXPECT_EQ(net->bn->running_mean.min().item<double>(), 7.0);
}

TEST(WeightEma, WithoutWarmupUsesTheDecayFromTheStart) {
  Net net;
  set_all(net, 0.0);
  WeightEma ema(*net, {.decay = 0.5, .warmup = false});
  set_all(net, 1.0);
  ema.update(*net);
  ema.update(*net);  // 0 -> 0.5 -> 0.75
  ema.copy_to(*net);
  EXPECT_DOUBLE_EQ(net->fc->weight.max().item<double>(), 0.75);
}

TEST(WeightEma, RejectsBadOptionsAndAnotherModel) {
  Net net;
  EXPECT_THROW(WeightEma(*net, {.decay = 1.0}), InvalidArgument);
  EXPECT_THROW(WeightEma(*net, {.decay = -0.1}), InvalidArgument);
  WeightEma ema(*net);
  ::torch::nn::Linear other(4, 2);
  try {
    ema.update(*other);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("WeightEma::update"), std::string::npos) << e.what();
  }
}

TEST(WeightEma, SavesAndLoads) {
  Net net;
  set_all(net, 2.0);
  WeightEma ema(*net, {.decay = 0.5, .warmup = false});
  set_all(net, 4.0);
  ema.update(*net);  // 3
  ::torch::serialize::OutputArchive out;
  ema.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);

  set_all(net, 0.0);
  WeightEma restored(*net, {.decay = 0.5, .warmup = false});
  ::torch::serialize::InputArchive in;
  std::istringstream source(bytes.str());
  in.load_from(source);
  restored.load(in);
  EXPECT_EQ(restored.updates(), 1);
  restored.copy_to(*net);
  EXPECT_DOUBLE_EQ(net->fc->bias.max().item<double>(), 3.0);
}

// SGD on f(w) = w²/2 (gradient w) for one scalar, Lookahead by hand.
TEST(Lookahead, MatchesTheAlgorithmOnAQuadratic) {
  auto w = ::torch::full({1}, 4.0, ::torch::dtype(::torch::kFloat64).requires_grad(true));
  ::torch::optim::SGD sgd({w}, ::torch::optim::SGDOptions(0.3));
  Lookahead lookahead({w}, {.k = 3, .alpha = 0.5});
  double fast = 4.0, slow = 4.0;
  for (int t = 1; t <= 10; ++t) {
    sgd.zero_grad();
    (w * w / 2).sum().backward();
    sgd.step();
    fast -= 0.3 * fast;
    const bool synced = lookahead.after_step();
    EXPECT_EQ(synced, t % 3 == 0);
    if (t % 3 == 0) {
      slow += 0.5 * (fast - slow);
      fast = slow;
    }
    EXPECT_NEAR(w.item<double>(), fast, 1e-12) << "step " << t;
  }
  EXPECT_THROW(Lookahead({w}, {.k = 0}), InvalidArgument);
  EXPECT_THROW(Lookahead({w}, {.alpha = 1.5}), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::optim
