// Issue 44.3: a seventh way of reducing gradients, added through the one
// extension point (gradient_scheme.h) the way docs/extending.md "Adding a
// gradient-reduction scheme" says: one class and one
// register_gradient_scheme() line. The scheme, "sign-mean", sends the sign
// of each rank's gradient and leaves their mean (signSGD's averaged vote,
// Bernstein et al. 2018), so its updates differ from averaged gradients by
// far more than rounding: two real workers show the optimizer used it, its
// three hooks included, and that the registry refuses what it must.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <algorithm>
#include <span>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/torch/gradient_scheme.h"
#include "torch/helpers.h"

// Its own namespace: the unity build compiles it with distributed_test.cc.
namespace lockstep::torch::gradient_scheme_test {
namespace {

using testing::make_mlp;
using testing::run_torch_workers;
namespace nnf = ::torch::nn::functional;

constexpr int kSteps = 3;
constexpr int64_t kBatch = 6;  // per rank
constexpr double kLr = 0.1;

// How often the optimizer called each hook, in this worker.
struct HookCalls {
  int ready = 0;
  int synchronize = 0;
  int step = 0;
};

class SignMean : public GradientScheme {
 public:
  SignMean(const GradientSchemeContext& c, HookCalls& calls)
      : group_(c.options.group), signs_(c.gradients), handles_(c.gradients), calls_(calls) {}

  bool gradient_ready(Gradient& g) override {
    ++calls_.ready;
    submit(g);
    return true;
  }
  void synchronize(std::span<Gradient* const> gradients) override {
    ++calls_.synchronize;
    for (Gradient* g : gradients)
      if (!handles_[g->index].valid()) submit(*g);
    for (Gradient* g : gradients) {
      handles_[g->index].wait();
      handles_[g->index] = TensorHandle();
      ::torch::NoGradGuard no_grad;
      dense_gradient(*g).copy_(signs_[g->index]);
    }
  }
  void step(::torch::optim::Optimizer& optimizer) override {
    ++calls_.step;
    optimizer.step();
  }
  void discard() override {
    for (auto& h : handles_) {
      if (h.valid()) h.wait();
      h = TensorHandle();
    }
  }
  void reset() noexcept override {
    for (auto& h : handles_) {
      try {
        if (h.valid()) h.wait();
      } catch (...) {
      }
      h = TensorHandle();
    }
  }

 private:
  void submit(const Gradient& g) {
    signs_[g.index] = dense_gradient(g).sign();
    handles_[g.index] = allreduce_async_(signs_[g.index], g.name + ".sign",
                                         {.op = ReduceOp::kAverage, .process_set = group_.id()});
  }

  Group group_;
  std::vector<::torch::Tensor> signs_;
  std::vector<TensorHandle> handles_;
  HookCalls& calls_;
};

HookCalls calls;  // this worker's; every test body runs in a fresh forked worker

void register_sign_mean() {
  register_gradient_scheme("sign-mean", [](const GradientSchemeContext& c) {
    return std::make_unique<SignMean>(c, calls);
  });
}

// Step s's global batch: rank r trains on rows [r kBatch, (r + 1) kBatch).
std::pair<::torch::Tensor, ::torch::Tensor> batch(int step, int of_rank) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(2000 + step);
  auto x = ::torch::randn({2 * kBatch, 8}, g);
  auto y = ::torch::randn({2 * kBatch, 4}, g);
  return {x.narrow(0, of_rank * kBatch, kBatch), y.narrow(0, of_rank * kBatch, kBatch)};
}

std::vector<::torch::Tensor> gradients_of(::torch::nn::Sequential& model, int step, int of_rank) {
  for (auto& p : model->parameters()) p.mutable_grad() = ::torch::Tensor();
  auto [x, y] = batch(step, of_rank);
  nnf::mse_loss(model->forward(x), y).backward();
  std::vector<::torch::Tensor> grads;
  for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

// Both ranks' gradients in one process, combined by `combine`, applied by
// plain SGD: what the distributed run must produce.
using Combine = std::function<::torch::Tensor(const ::torch::Tensor&, const ::torch::Tensor&)>;
std::vector<::torch::Tensor> reference(const Combine& combine) {
  auto model = make_mlp(7);
  ::torch::optim::SGD sgd(model->parameters(), kLr);
  for (int s = 0; s < kSteps; ++s) {
    const auto g0 = gradients_of(model, s, 0);
    const auto g1 = gradients_of(model, s, 1);
    auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = combine(g0[i], g1[i]);
    sgd.step();
  }
  std::vector<::torch::Tensor> out;
  for (auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

std::vector<::torch::Tensor> distributed(Overlap overlap) {
  auto model = make_mlp(7);
  ::torch::optim::SGD sgd(model->parameters(), kLr);
  DistributedOptimizer dist(sgd, *model, {.overlap = overlap, .scheme = "sign-mean"});
  EXPECT_EQ(dist.overlaps_backward(), overlap == Overlap::kOn);
  for (int s = 0; s < kSteps; ++s) {
    dist.zero_grad();
    auto [x, y] = batch(s, rank());
    nnf::mse_loss(model->forward(x), y).backward();
    dist.step();
  }
  std::vector<::torch::Tensor> out;
  for (auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

void expect_sign_mean_used(Overlap overlap) {
  register_sign_mean();
  const auto actual = distributed(overlap);
  const auto signs =
      reference([](const auto& a, const auto& b) { return (a.sign() + b.sign()) / 2; });
  const auto means = reference([](const auto& a, const auto& b) { return (a + b) / 2; });
  ASSERT_EQ(actual.size(), signs.size());
  double from_means = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_TRUE(::torch::equal(actual[i], signs[i])) << "parameter " << i << " on rank " << rank();
    from_means = std::max(from_means, (actual[i] - means[i]).abs().max().item<double>());
  }
  EXPECT_GT(from_means, 1e-3) << "sign-mean's updates should not be those of averaged gradients";
  const int parameters = static_cast<int>(actual.size());
  EXPECT_EQ(calls.ready, overlap == Overlap::kOn ? kSteps * parameters : 0);
  EXPECT_EQ(calls.synchronize, kSteps);
  EXPECT_EQ(calls.step, kSteps);
}

TEST(GradientScheme, ASeventhSchemeRegisteredByNameReducesEveryStepOverlapped) {
  run_torch_workers(2, [] { expect_sign_mean_used(Overlap::kOn); });
}

TEST(GradientScheme, ASeventhSchemeRegisteredByNameReducesEveryStepFused) {
  run_torch_workers(2, [] { expect_sign_mean_used(Overlap::kOff); });
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GradientScheme, RegistryListsTheSevenAndRefusesDuplicatesUnknownNamesAndMixedOptions) {
  run_torch_workers(2, [] {
    register_sign_mean();
    EXPECT_THAT(gradient_scheme_names(),
                ::testing::ElementsAre("allreduce", "adasum", "powersgd", "onebit", "onebit-adam",
                                       "onebit-lamb", "sign-mean"));
    EXPECT_THAT(error_of(register_sign_mean), ::testing::HasSubstr("'sign-mean' exists already"));
    EXPECT_THAT(error_of([] { register_gradient_scheme("powersgd", {}); }),
                ::testing::HasSubstr("factory is empty"));
    EXPECT_THAT(error_of([] {
                  register_gradient_scheme("adasum", [](const GradientSchemeContext& c) {
                    return std::make_unique<SignMean>(c, calls);
                  });
                }),
                ::testing::HasSubstr("'adasum' exists already"));
    auto model = make_mlp(7);
    ::torch::optim::SGD sgd(model->parameters(), kLr);
    EXPECT_THAT(error_of([&] { DistributedOptimizer d(sgd, *model, {.scheme = "top-k"}); }),
                ::testing::AllOf(::testing::HasSubstr("no gradient scheme named 'top-k'"),
                                 ::testing::HasSubstr("sign-mean")));
    EXPECT_THAT(error_of([&] {
                  DistributedOptimizer d(
                      sgd, *model, {.compression = Compression::kFp16, .scheme = "sign-mean"});
                }),
                ::testing::HasSubstr("drop one"));
    // A refused optimizer left no hook behind: a plain one over the same
    // model still trains.
    DistributedOptimizer plain(sgd, *model, {.overlap = Overlap::kOn});
    auto [x, y] = batch(0, rank());
    nnf::mse_loss(model->forward(x), y).backward();
    plain.step();
    EXPECT_EQ(calls.ready + calls.synchronize + calls.step, 0);
  });
}

}  // namespace
}  // namespace lockstep::torch::gradient_scheme_test
