// PowerSGD: Gram-Schmidt and the wire-size rule as pure functions; at 2
// ranks, a rank-1 average recovered exactly, warm-up steps equal to plain
// allreduce bit for bit, bytes handed to the communicator per step (traffic
// counters) reduced by the closed-form factor, and training that reaches the
// accuracy of uncompressed allreduce on a small classification problem.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "lockstep/base/error.h"
#include "lockstep/comm/traffic.h"
#include "lockstep/torch/powersgd.h"
#include "torch/helpers.h"

namespace lockstep::torch {
namespace {

using ::torch::Tensor;
using testing::run_torch_workers;
namespace nn = ::torch::nn;
namespace nnf = ::torch::nn::functional;

TEST(PowerSGD, OrthonormalizeColumns) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(1);
  Tensor p = ::torch::randn({20, 4}, g, ::torch::kFloat64);
  const Tensor first = p.select(1, 0).clone();
  orthonormalize_columns_(p);
  EXPECT_TRUE(::torch::allclose(p.t().matmul(p), ::torch::eye(4, ::torch::kFloat64), 0, 1e-12));
  // Gram-Schmidt keeps the first direction.
  EXPECT_TRUE(::torch::allclose(p.select(1, 0), first / first.norm(), 0, 1e-12));
  Tensor z = ::torch::zeros({5, 2});
  orthonormalize_columns_(z);
  EXPECT_TRUE(::torch::equal(z, ::torch::zeros({5, 2})));  // no NaN from 0/0
}

TEST(PowerSGD, WireElementsFollowTheCompressionRule) {
  const PowerSGDOptions r4{.rank = 4};
  EXPECT_EQ(powersgd_wire_elements({256, 128}, r4), (256 + 128) * 4);
  EXPECT_EQ(powersgd_wire_elements({16}, r4), 16);     // vectors go whole
  EXPECT_EQ(powersgd_wire_elements({4, 4}, r4), 16);   // factors would not be 2x smaller
  EXPECT_EQ(powersgd_wire_elements({8, 3, 3, 3}, {.rank = 1}), 8 + 27);  // conv: n x (rest)
  EXPECT_EQ(powersgd_wire_elements({100, 2}, {.rank = 8}), 200);  // r capped at 2: no gain
  EXPECT_THROW(validate(PowerSGDOptions{.rank = 0}), InvalidArgument);
  EXPECT_THROW(validate(PowerSGDOptions{.warmup_steps = -1}), InvalidArgument);
  EXPECT_THROW(validate(PowerSGDOptions{.min_compression_rate = 0.5}), InvalidArgument);
  auto model = nn::Linear(4, 4);
  ::torch::optim::SGD sgd(model->parameters(), 0.1);
  EXPECT_THROW(DistributedOptimizer(sgd, *model, {.compression = Compression::kPowerSGD,
                                                  .gradient_predivide_factor = 2.0}),
               InvalidArgument);
}

// Every rank's gradient is u v_rank^T: the average is rank 1 and rank-1
// PowerSGD must recover it (up to rounding); the bias goes whole.
void check_rank_one_average_is_exact() {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(3);
  const Tensor u = ::torch::randn({48, 1}, g, ::torch::kFloat64);
  std::vector<Tensor> v{::torch::randn({1, 40}, g, ::torch::kFloat64),
                        ::torch::randn({1, 40}, g, ::torch::kFloat64)};
  std::vector<Tensor> b{::torch::randn({48}, g, ::torch::kFloat64),
                        ::torch::randn({48}, g, ::torch::kFloat64)};
  PowerSGD psgd({.rank = 1}, Group(), "exact");
  for (int step = 0; step < 2; ++step) {
    std::vector<Tensor> grads{u.matmul(v[rank()]).clone(), b[rank()].clone()};
    psgd.reduce(grads, {"w", "b"}, /*average=*/true);
    const Tensor mean = u.matmul((v[0] + v[1]) / 2);
    EXPECT_TRUE(::torch::allclose(grads[0], mean, 0, 1e-12)) << "step " << step;
    EXPECT_TRUE(::torch::allclose(grads[1], (b[0] + b[1]) / 2, 0, 1e-15));
  }
}

// Warm-up steps are plain allreduces: the same bits as allreduce_.
void check_warmup_is_plain_allreduce() {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(10 + rank());
  PowerSGD psgd({.rank = 1, .warmup_steps = 1}, Group(), "warm");
  std::vector<Tensor> grads{::torch::randn({32, 32}, g)};
  Tensor plain = grads[0].clone();
  allreduce_(plain, "warm.plain", {.op = ReduceOp::kAverage});
  psgd.reduce(grads, {"w"}, true);
  EXPECT_TRUE(::torch::equal(grads[0], plain));
  grads = {::torch::randn({32, 32}, g)};
  plain = grads[0].clone();
  allreduce_(plain, "warm.plain2", {.op = ReduceOp::kAverage});
  psgd.reduce(grads, {"w"}, true);  // compressed now: rank 1 of a full-rank average
  EXPECT_FALSE(::torch::allclose(grads[0], plain, 0, 1e-3));
}

nn::Sequential wide_model() {
  ::torch::manual_seed(4);
  return nn::Sequential(nn::Linear(256, 192), nn::Tanh(), nn::Linear(192, 128), nn::Tanh(),
                        nn::Linear(128, 10));
}

// Payload bytes this rank hands the communicator in one synchronize():
// closed form sum(numel) x 4 uncompressed, sum((n + m) r or numel) x 4 with
// PowerSGD; engine negotiation comes on top of both.
uint64_t payload_per_step(Compression compression, int r) {
  auto model = wide_model();
  ::torch::optim::SGD sgd(model->parameters(), 0.01);
  DistributedOptimizer dist(sgd, *model,
                            {.compression = compression, .powersgd = {.rank = r},
                             .name_prefix = fmt::format("traffic{}", r),
                             .overlap = Overlap::kOff});
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(20 + rank());
  uint64_t bytes = 0;
  for (int step = 0; step < 2; ++step) {  // the second step: negotiation cached
    dist.zero_grad();
    model->forward(::torch::randn({8, 256}, g)).square().mean().backward();
    const comm::Traffic before = comm::traffic();
    dist.synchronize();
    bytes = (comm::traffic() - before).payload_bytes;
    sgd.step();
  }
  return bytes;
}

void check_traffic_follows_closed_form() {
  int64_t whole = 0, compressed = 0;
  const PowerSGDOptions options{.rank = 4};
  for (auto& p : wide_model()->parameters()) {
    whole += p.numel() * 4;
    compressed += powersgd_wire_elements(p.sizes(), options) * 4;
  }
  const double none = static_cast<double>(payload_per_step(Compression::kNone, 4));
  const double psgd = static_cast<double>(payload_per_step(Compression::kPowerSGD, 4));
  // Negotiation adds a little to both; the data dominate.
  EXPECT_NEAR(none, static_cast<double>(whole), 0.05 * static_cast<double>(whole));
  EXPECT_NEAR(psgd, static_cast<double>(compressed), 0.05 * static_cast<double>(compressed));
  EXPECT_LT(psgd / none, 1.05 * static_cast<double>(compressed) / static_cast<double>(whole));
  if (rank() == 0)
    std::printf("payload per step: %.0f B uncompressed (closed form %lld), %.0f B PowerSGD r=4 "
                "(closed form %lld)\n", none, static_cast<long long>(whole), psgd,
                static_cast<long long>(compressed));
}

TEST(PowerSGD, TwoRanksExactAverageWarmupAndTraffic) {
  run_torch_workers(2, [] {
    check_rank_one_average_is_exact();
    check_warmup_is_plain_allreduce();
    check_traffic_follows_closed_form();
  });
}

// Gaussian points in 16 dimensions, 4 classes, labelled by a fixed random teacher.
std::pair<Tensor, Tensor> classes(int64_t rows, uint64_t seed) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(seed);
  auto teacher = ::torch::randn({16, 4}, ::torch::make_generator<at::CPUGeneratorImpl>(99));
  Tensor x = ::torch::randn({rows, 16}, g);
  return {x, x.matmul(teacher).argmax(1)};
}

double train_accuracy(Compression compression) {
  ::torch::manual_seed(8);
  auto model = nn::Sequential(nn::Linear(16, 64), nn::ReLU(), nn::Linear(64, 4));
  ::torch::optim::SGD sgd(model->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
  DistributedOptimizer dist(sgd, *model,
                            {.compression = compression,
                             .powersgd = {.rank = 2, .warmup_steps = 5},
                             .name_prefix = fmt::format("train{}", static_cast<int>(compression))});
  for (int step = 0; step < 200; ++step) {
    auto [x, y] = classes(32, 1000 * static_cast<uint64_t>(step) + static_cast<uint64_t>(rank()));
    dist.zero_grad();
    nnf::cross_entropy(model->forward(x), y).backward();
    dist.step();
  }
  auto [x, y] = classes(2000, 7);
  ::torch::NoGradGuard no_grad;
  return model->forward(x).argmax(1).eq(y).to(::torch::kFloat64).mean().item<double>();
}

TEST(PowerSGD, TrainsAsWellAsUncompressedAllreduce) {
  run_torch_workers(2, [] {
    const double none = train_accuracy(Compression::kNone);
    const double psgd = train_accuracy(Compression::kPowerSGD);
    EXPECT_GE(none, 0.9);
    EXPECT_GE(psgd, 0.9);
    EXPECT_GE(psgd, none - 0.03) << "uncompressed " << none;
    if (rank() == 0) std::printf("test accuracy: %.4f uncompressed, %.4f PowerSGD r=2\n", none, psgd);
  });
}

}  // namespace
}  // namespace lockstep::torch
