// Mixed precision: bf16 autocast against fp32, master weights, the loss
// scaler's rules and its collective skip decision, fp16 wire gradients.
#include <ATen/autocast_mode.h>
#include <gmock/gmock.h>

#include "lockstep/base/error.h"
#include "lockstep/optim/lamb.h"
#include "torch/helpers.h"

namespace lockstep::torch {
namespace {

using testing::flat_parameters;
using testing::make_mlp;
using testing::run_torch_workers;
namespace nnf = ::torch::nn::functional;

::torch::nn::Sequential make_cnn(uint64_t seed) {
  ::torch::manual_seed(seed);
  return ::torch::nn::Sequential(::torch::nn::Conv2d(::torch::nn::Conv2dOptions(1, 8, 3)),
                                 ::torch::nn::ReLU(), ::torch::nn::Flatten(),
                                 ::torch::nn::Linear(8 * 6 * 6, 10));
}

double relative_error(const ::torch::Tensor& a, const ::torch::Tensor& b) {
  return ((a - b).norm() / b.norm()).item<double>();
}

std::vector<::torch::Tensor> gradients(::torch::nn::Module& m) {
  std::vector<::torch::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.grad().clone());
  return out;
}

// docs/mixed-precision.md states these tolerances for one bf16-autocast
// step: bf16 keeps 8 significant bits, and a gradient that is a small sum of
// large cancelling terms loses relatively more of them than the loss does.
constexpr double kBf16LossTolerance = 2e-2;
constexpr double kBf16GradTolerance = 1e-1;
constexpr double kBf16MinCosine = 0.99;

double cosine(const ::torch::Tensor& a, const ::torch::Tensor& b) {
  return (a.flatten().dot(b.flatten()) / (a.norm() * b.norm())).item<double>();
}

TEST(MixedPrecision, Bf16AutocastStepMatchesFp32WithinTheDocumentedTolerance) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(3);
  auto x = ::torch::randn({16, 1, 8, 8}, g);
  auto y = ::torch::randint(0, 10, {16}, g);
  auto step = [&](Precision precision) {
    auto model = make_cnn(11);
    ::torch::optim::SGD opt(model->parameters(), 0.1);
    opt.zero_grad();
    ::torch::Tensor loss;
    {
      AutocastGuard autocast(precision);
      auto logits = model->forward(x);
      EXPECT_EQ(logits.scalar_type(),
                precision == Precision::kBf16 ? ::torch::kBFloat16 : ::torch::kFloat32);
      loss = nnf::cross_entropy(logits.to(::torch::kFloat32), y);
    }
    loss.backward();
    auto grads = gradients(*model);
    opt.step();
    for (auto& p : model->parameters()) EXPECT_EQ(p.scalar_type(), ::torch::kFloat32);
    return std::make_tuple(loss.item<double>(), grads, flat_parameters(*model));
  };
  auto [loss32, grads32, params32] = step(Precision::kFp32);
  auto [loss16, grads16, params16] = step(Precision::kBf16);
  EXPECT_NEAR(loss16, loss32, kBf16LossTolerance * std::abs(loss32));
  for (size_t i = 0; i < grads32.size(); ++i) {
    EXPECT_EQ(grads16[i].scalar_type(), ::torch::kFloat32) << "master gradients stay fp32";
    EXPECT_LT(relative_error(grads16[i], grads32[i]), kBf16GradTolerance) << "gradient " << i;
    EXPECT_GT(cosine(grads16[i], grads32[i]), kBf16MinCosine) << "gradient " << i;
    EXPECT_GT(relative_error(grads16[i], grads32[i]), 0.0) << "bf16 changed nothing: not applied?";
  }
  EXPECT_LT(relative_error(params16, params32), 1e-3);
}

TEST(MixedPrecision, AutocastGuardRestoresAndNests) {
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  {
    AutocastGuard outer(Precision::kBf16);
    EXPECT_TRUE(at::autocast::is_cpu_enabled());
    {
      AutocastGuard inner(Precision::kBf16);
      AutocastGuard off(Precision::kFp32);  // fp32 changes nothing
      EXPECT_TRUE(at::autocast::is_cpu_enabled());
    }
    EXPECT_TRUE(at::autocast::is_cpu_enabled());
  }
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  EXPECT_THROW(parse_precision("fp8"), InvalidArgument);
}

// Single process: the scale follows GradScaler's rules step by step.
TEST(MixedPrecision, ScaleGrowsAfterTheIntervalAndBacksOffOnOverflow) {
  auto model = make_mlp(1);
  ::torch::optim::SGD opt(model->parameters(), 0.1);
  GradScaler scaler({.init_scale = 8, .growth_interval = 3});
  auto x = ::torch::ones({2, 8});
  std::vector<double> scales;
  std::vector<bool> stepped;
  for (int s = 0; s < 8; ++s) {
    opt.zero_grad();
    auto loss = model->forward(x).sum();
    if (s == 4) loss = loss * std::numeric_limits<float>::infinity();
    scaler.scale(loss).backward();
    stepped.push_back(scaler.step(opt));
    scales.push_back(scaler.get_scale());
  }
  // finite x3 -> 16; step 3 finite (tracker 1); step 4 inf -> 8, skipped;
  // steps 5, 6, 7 finite -> 16 after the third.
  EXPECT_THAT(scales, ::testing::ElementsAre(8, 8, 16, 16, 8, 8, 8, 16));
  EXPECT_THAT(stepped, ::testing::ElementsAre(true, true, true, true, false, true, true, true));
  EXPECT_EQ(scaler.skipped_steps(), 1);
  GradScaler restored;
  restored.load_state(scaler.state());
  EXPECT_EQ(restored.get_scale(), 16);
  EXPECT_EQ(restored.skipped_steps(), 1);
}

// With a power-of-two scale, unscaling is exact: LAMB on the fp32 masters
// takes exactly the steps it takes without scaling.
TEST(MixedPrecision, LambOnFp32MastersIsUnchangedByLossScaling) {
  auto run = [](bool scaled) {
    auto model = make_mlp(5);
    optim::Lamb lamb(model->parameters(), optim::LambOptions(0.01));
    GradScaler scaler({.enabled = scaled, .init_scale = 1024});
    auto g = ::torch::make_generator<at::CPUGeneratorImpl>(9);
    for (int s = 0; s < 5; ++s) {
      auto x = ::torch::randn({4, 8}, g);
      lamb.zero_grad();
      scaler.scale(model->forward(x).pow(2).mean()).backward();
      scaler.step(lamb);
    }
    return flat_parameters(*model);
  };
  EXPECT_TRUE(::torch::equal(run(true), run(false)));
}

// Rank 1 alone overflows at step 2. Every rank must skip that step, count it
// and back off, and all ranks must end with identical parameters equal to a
// reference that never took step 2.
void overflow_on_one_rank(bool distributed) {
  auto model = make_mlp(7);
  ::torch::optim::SGD opt(model->parameters(), 0.05);
  std::unique_ptr<DistributedOptimizer> dist;
  if (distributed) {
    DistributedOptimizerOptions o;
    o.overlap = Overlap::kOff;
    dist = std::make_unique<DistributedOptimizer>(opt, *model, o);
  }
  GradScaler scaler({.init_scale = 1024, .growth_interval = 100});
  for (int s = 0; s < 4; ++s) {
    auto x = ::torch::full({3, 8}, 0.1 * (s + 1));
    opt.zero_grad();
    auto loss = model->forward(x).sum();
    if (s == 2 && rank() == 1) loss = loss * std::numeric_limits<float>::infinity();
    scaler.scale(loss).backward();
    bool stepped = distributed ? scaler.step(*dist) : scaler.step(opt);
    EXPECT_EQ(stepped, s != 2) << "rank " << rank() << " step " << s;
  }
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(scaler.get_scale(), 512);
  // Identical on every rank: rank 0's parameters, broadcast, compared.
  auto mine = flat_parameters(*model);
  EXPECT_TRUE(::torch::equal(broadcast(mine, 0, "params"), mine)) << "ranks diverged";
  // Reference: the same steps in one process, step 2 left out.
  auto ref = make_mlp(7);
  ::torch::optim::SGD ref_opt(ref->parameters(), 0.05);
  for (int s = 0; s < 4; ++s) {
    if (s == 2) continue;
    ref_opt.zero_grad();
    ref->forward(::torch::full({3, 8}, 0.1 * (s + 1))).sum().backward();
    ref_opt.step();
  }
  EXPECT_TRUE(::torch::allclose(mine, flat_parameters(*ref), 1e-6, 1e-7));
}

TEST(MixedPrecision, OneRankOverflowingSkipsTheStepOnEveryRankWithDistributedOptimizer) {
  run_torch_workers(2, [] { overflow_on_one_rank(true); });
}

TEST(MixedPrecision, OneRankOverflowingSkipsTheStepOnEveryRankWithAPlainOptimizer) {
  run_torch_workers(2, [] { overflow_on_one_rank(false); });
}

// Gradients of 1e-8 flush to zero in fp16 on the wire; scaled by 65536 they
// survive and unscale to what fp32 gives (within fp16's 11-bit precision).
TEST(MixedPrecision, LossScalingKeepsTinyFp16WireGradientsAlive) {
  run_torch_workers(2, [] {
    auto grads_after = [](bool scaled) {
      auto w = ::torch::ones({64}, ::torch::requires_grad());
      ::torch::optim::SGD opt({w}, 0.0);
      DistributedOptimizerOptions o;
      o.compression = Compression::kFp16;
      o.overlap = Overlap::kOff;
      DistributedOptimizer dist(opt, {{"w", w}}, o);
      GradScaler scaler({.enabled = scaled, .init_scale = 65536});
      opt.zero_grad();
      scaler.scale((w * 1e-8 * (rank() + 1)).sum()).backward();
      scaler.step(dist);
      return w.grad().clone();
    };
    EXPECT_EQ(grads_after(false).abs().max().item<float>(), 0.0f) << "expected fp16 underflow";
    auto g = grads_after(true);
    EXPECT_NEAR(g[0].item<float>(), 1.5e-8, 1.5e-8 * 1e-3);  // mean of 1e-8 and 2e-8
  });
}

}  // namespace
}  // namespace lockstep::torch
