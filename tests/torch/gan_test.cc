// Issue 45.4: two models in one process (PyTorch's DCGAN loop). The
// generator's backward runs through the discriminator and accumulates into
// D's .grad after D has stepped; D's next zero_grad() drops it. With overlap
// on, that garbage must not start an allreduce that poisons D's next
// reduction. Every case is compared with the same loop on plain LibTorch
// optimizers whose gradients are averaged by hand with lockstep::torch::allreduce.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include "lockstep/base/error.h"
#include "torch/helpers.h"

namespace lockstep::torch {
namespace {

using testing::flat_parameters;
using testing::run_torch_workers;
namespace nn = ::torch::nn;
namespace nnf = ::torch::nn::functional;

constexpr int kSteps = 6;
constexpr int64_t kBatch = 8;  // per rank
constexpr int64_t kNoise = 4;

enum class DStep { kTwoBackwards, kOneBackward };  // DCGAN's errD_real, errD_fake; or their sum
enum class ZeroGrad { kWrapper, kModule };         // dist.zero_grad() or module->zero_grad()

struct GanCase {
  DStep d_step = DStep::kTwoBackwards;
  ZeroGrad zero = ZeroGrad::kWrapper;
  Overlap overlap = Overlap::kOn;
};

struct Gan {
  nn::Sequential g{nullptr};
  nn::Sequential d{nullptr};
  std::unique_ptr<::torch::optim::Adam> g_opt;
  std::unique_ptr<::torch::optim::Adam> d_opt;
};

Gan make_gan() {
  Gan gan;
  ::torch::manual_seed(3);
  gan.g = nn::Sequential(nn::Linear(kNoise, 16), nn::Tanh(), nn::Linear(16, 2));
  gan.d = nn::Sequential(nn::Linear(2, 16), nn::Tanh(), nn::Linear(16, 1));
  const auto adam = ::torch::optim::AdamOptions(2e-3).betas({0.5, 0.999});
  gan.g_opt = std::make_unique<::torch::optim::Adam>(gan.g->parameters(), adam);
  gan.d_opt = std::make_unique<::torch::optim::Adam>(gan.d->parameters(), adam);
  return gan;
}

// This rank's real samples and noise at step s: different on every rank.
std::pair<::torch::Tensor, ::torch::Tensor> batch(int step) {
  auto gen = ::torch::make_generator<at::CPUGeneratorImpl>(100 * step + rank());
  auto real = ::torch::randn({kBatch, 2}, gen) * 0.3 + 1.0;
  auto noise = ::torch::randn({kBatch, kNoise}, gen);
  return {real, noise};
}

::torch::Tensor bce(const ::torch::Tensor& logits, double label) {
  return nnf::binary_cross_entropy_with_logits(logits, ::torch::full_like(logits, label));
}

// One DCGAN iteration; the callables zero, average and step each model.
template <typename Zero, typename Step>
void gan_iteration(Gan& gan, int s, const GanCase& c, Zero zero, Step step) {
  auto [real, noise] = batch(s);
  zero(0);  // D
  auto fake = gan.g->forward(noise);
  if (c.d_step == DStep::kTwoBackwards) {
    bce(gan.d->forward(real), 1.0).backward();
    bce(gan.d->forward(fake.detach()), 0.0).backward();
  } else {
    (bce(gan.d->forward(real), 1.0) + bce(gan.d->forward(fake.detach()), 0.0)).backward();
  }
  step(0);
  zero(1);  // G: its backward goes through D and accumulates into D's .grad
  bce(gan.d->forward(fake), 1.0).backward();
  step(1);
}

void average_by_hand(nn::Module& m, const std::string& prefix) {
  for (const auto& item : m.named_parameters()) {
    ::torch::Tensor& grad = item.value().mutable_grad();
    if (!grad.defined()) grad = ::torch::zeros_like(item.value());
    grad.copy_(allreduce(grad, "ref." + prefix + item.key()));
  }
}

::torch::Tensor reference(const GanCase& c) {
  Gan gan = make_gan();
  nn::Sequential* models[] = {&gan.d, &gan.g};
  ::torch::optim::Optimizer* opts[] = {gan.d_opt.get(), gan.g_opt.get()};
  for (int s = 0; s < kSteps; ++s)
    gan_iteration(
        gan, s, c, [&](int i) { opts[i]->zero_grad(); },
        [&](int i) {
          average_by_hand(**models[i], fmt::format("{}.{}.", i, s));
          opts[i]->step();
        });
  return ::torch::cat({flat_parameters(*gan.d), flat_parameters(*gan.g)});
}

::torch::Tensor distributed(const GanCase& c) {
  Gan gan = make_gan();
  DistributedOptimizerOptions d_options{.overlap = c.overlap};
  d_options.name_prefix = "d";
  d_options.backward_passes_per_step = c.d_step == DStep::kTwoBackwards ? 2 : 1;
  DistributedOptimizerOptions g_options{.overlap = c.overlap};
  g_options.name_prefix = "g";
  DistributedOptimizer d(*gan.d_opt, *gan.d, d_options);
  DistributedOptimizer g(*gan.g_opt, *gan.g, g_options);
  EXPECT_EQ(d.overlaps_backward(), c.overlap == Overlap::kOn);
  DistributedOptimizer* dists[] = {&d, &g};
  nn::Sequential* models[] = {&gan.d, &gan.g};
  for (int s = 0; s < kSteps; ++s)
    gan_iteration(
        gan, s, c,
        [&](int i) {
          if (c.zero == ZeroGrad::kWrapper)
            dists[i]->zero_grad();
          else
            (*models[i])->zero_grad();
        },
        [&](int i) { dists[i]->step(); });
  return ::torch::cat({flat_parameters(*gan.d), flat_parameters(*gan.g)});
}

void expect_matches_reference(const GanCase& c) {
  run_torch_workers(2, [&] {
    const auto expected = reference(c);
    const auto actual = distributed(c);
    EXPECT_LE((actual - expected).abs().max().item<double>(), 1e-6);
  });
}

TEST(Gan, DcganLoopTwoDBackwardsOverlapOnMatchesHandAveraged) {
  expect_matches_reference({.d_step = DStep::kTwoBackwards, .overlap = Overlap::kOn});
}

TEST(Gan, DcganLoopTwoDBackwardsOverlapOffMatchesHandAveraged) {
  expect_matches_reference({.d_step = DStep::kTwoBackwards, .overlap = Overlap::kOff});
}

TEST(Gan, DcganLoopOneDBackwardOverlapOnMatchesHandAveraged) {
  expect_matches_reference({.d_step = DStep::kOneBackward, .overlap = Overlap::kOn});
}

TEST(Gan, DcganLoopOneDBackwardOverlapOffMatchesHandAveraged) {
  expect_matches_reference({.d_step = DStep::kOneBackward, .overlap = Overlap::kOff});
}

// zero_grad() on the modules, not the wrappers: the optimizer sees the
// gradients cleared from their version counters.
TEST(Gan, ModuleZeroGradOverlapOnMatchesHandAveraged) {
  expect_matches_reference(
      {.d_step = DStep::kTwoBackwards, .zero = ZeroGrad::kModule, .overlap = Overlap::kOn});
  expect_matches_reference(
      {.d_step = DStep::kOneBackward, .zero = ZeroGrad::kModule, .overlap = Overlap::kOn});
}

// DCGAN's two D backward passes with backward_passes_per_step=1: overlap on
// cannot reduce what a later pass adds, so it is an error that says so.
TEST(Gan, SecondBackwardWithOnePassPerStepNamesTheFix) {
  run_torch_workers(2, [] {
    Gan gan = make_gan();
    DistributedOptimizer d(*gan.d_opt, *gan.d, {.overlap = Overlap::kOn});
    auto [real, noise] = batch(0);
    d.zero_grad();
    bce(gan.d->forward(real), 1.0).backward();
    try {
      bce(gan.d->forward(gan.g->forward(noise).detach()), 0.0).backward();
      ADD_FAILURE() << "no error";
    } catch (const std::exception& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("backward_passes_per_step=2"));
    }
    d.reset();
  });
}

}  // namespace
}  // namespace lockstep::torch
