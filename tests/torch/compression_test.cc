// Gradient compression that replaces the allreduce. PowerSGD: Gram-Schmidt
// and the wire-size rule as pure functions; at 2 ranks, a rank-1 average
// recovered exactly, warm-up steps equal to plain allreduce bit for bit,
// bytes handed to the communicator per step (traffic counters) reduced by
// the closed-form factor. 1-bit: sign packing; at 2 ranks, ±s vectors pass
// exactly, error feedback makes the applied mean converge to the true one,
// traffic against the closed form. Both, 1-bit Adam (onebit_adam_test.cc)
// and 1-bit LAMB (onebit_lamb_test.cc), train a small classifier to the
// accuracy of their uncompressed reference.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "lockstep/base/error.h"
#include "lockstep/comm/traffic.h"
#include "lockstep/optim/lamb.h"
#include "lockstep/torch/onebit.h"
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
uint64_t payload_per_step(Compression compression, int r /* PowerSGD's rank */) {
  auto model = wide_model();
  ::torch::optim::SGD sgd(model->parameters(), 0.01);
  DistributedOptimizer dist(sgd, *model,
                            {.compression = compression, .powersgd = {.rank = r},
                             .name_prefix = fmt::format("traffic{}.{}", static_cast<int>(compression), r),
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

TEST(OneBit, SignsPackEightToAByteAndBack) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(2);
  Tensor x = ::torch::randn({64}, g);
  x[5] = 0;  // zero counts as +1
  const Tensor packed = pack_signs(x);
  EXPECT_EQ(packed.numel(), 8);
  EXPECT_EQ(packed.scalar_type(), ::torch::kUInt8);
  EXPECT_TRUE(::torch::equal(unpack_signs(packed, ::torch::kFloat32),
                             ::torch::where(x.ge(0), 1.0f, -1.0f)));
  EXPECT_EQ(pack_signs(::torch::ones({8}))[0].item<int>(), 255);
  EXPECT_EQ(pack_signs(::torch::tensor({1, -1, -1, -1, -1, -1, -1, -1}))[0].item<int>(), 128);
  EXPECT_THROW(pack_signs(::torch::ones({7})), InvalidArgument);
  // 1000 values on 2 ranks: padded to 1008, rows of 63 sign bytes + 4 scale
  // bytes; the alltoall sends 2 rows, the allgather 1.
  EXPECT_EQ(onebit_payload_bytes(1000, 2), 3 * 67);
  EXPECT_THROW(validate(OneBitOptions{.warmup_steps = -1}), InvalidArgument);
}

// Identical ±s gradients on every rank pass through unchanged (their signs
// and scale are exact), which pins the chunk order of both collectives.
void check_sign_vectors_pass_exactly() {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(40);
  const Tensor signs = ::torch::randn({96}, g).sign();
  std::vector<Tensor> grads{(signs.narrow(0, 0, 64) * 0.5).reshape({8, 8}),
                            signs.narrow(0, 64, 32) * 0.5};
  const std::vector<Tensor> expected{grads[0].clone(), grads[1].clone()};
  OneBit onebit({}, Group(), "exact1");
  onebit.reduce(grads, {"w", "b"}, true);
  EXPECT_TRUE(::torch::allclose(grads[0], expected[0], 0, 1e-7));
  EXPECT_TRUE(::torch::allclose(grads[1], expected[1], 0, 1e-7));
}

// Error feedback: with the same gradients every step, what is applied over
// k steps approaches k times the true mean (the errors carry the rest).
void check_error_feedback_tracks_the_mean() {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(50 + rank());
  const Tensor mine = ::torch::randn({200}, g);
  const Tensor mean = allreduce(mine, "ef.mean", {.op = ReduceOp::kAverage});
  OneBit onebit({}, Group(), "ef");
  Tensor applied = ::torch::zeros({200});
  double first_error = 0;
  for (int k = 1; k <= 64; ++k) {
    std::vector<Tensor> grads{mine.clone()};
    onebit.reduce(grads, {"w"}, true);
    applied += grads[0];
    const double error = ((applied / k - mean).norm() / mean.norm()).item<double>();
    if (k == 1) first_error = error;
    if (k == 64) {
      EXPECT_LT(error, 0.1) << "after 64 steps";
      EXPECT_LT(error, first_error / 4) << "one step: " << first_error;
    }
  }
}

void check_onebit_traffic() {
  int64_t values = 0;
  for (auto& p : wide_model()->parameters()) values += p.numel();
  const uint64_t bytes = payload_per_step(Compression::kOneBit, 0);
  const double closed = static_cast<double>(onebit_payload_bytes(values, 2));
  EXPECT_NEAR(static_cast<double>(bytes), closed, 0.05 * closed);
  if (rank() == 0)
    std::printf("1-bit payload per step: %llu B (closed form %.0f) for %lld fp32 values "
                "(%lld B)\n", static_cast<unsigned long long>(bytes), closed,
                static_cast<long long>(values), static_cast<long long>(4 * values));
}

TEST(OneBit, TwoRanksExactSignsErrorFeedbackAndTraffic) {
  run_torch_workers(2, [] {
    check_sign_vectors_pass_exactly();
    check_error_feedback_tracks_the_mean();
    check_onebit_traffic();
  });
}

// Gaussian points in 16 dimensions, 4 classes, labelled by a fixed random teacher.
std::pair<Tensor, Tensor> classes(int64_t rows, uint64_t seed) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(seed);
  auto teacher = ::torch::randn({16, 4}, ::torch::make_generator<at::CPUGeneratorImpl>(99));
  Tensor x = ::torch::randn({rows, 16}, g);
  return {x, x.matmul(teacher).argmax(1)};
}

// Momentum SGD, or Adam, AdamW or LAMB (for 1-bit Adam, 1-bit LAMB and
// their uncompressed references).
double train_accuracy(Compression compression, const std::string& optimizer_name = "sgd") {
  ::torch::manual_seed(8);
  auto model = nn::Sequential(nn::Linear(16, 64), nn::ReLU(), nn::Linear(64, 4));
  std::unique_ptr<::torch::optim::Optimizer> optimizer;
  if (optimizer_name == "adam")
    optimizer = std::make_unique<::torch::optim::Adam>(model->parameters(),
                                                       ::torch::optim::AdamOptions(0.01));
  else if (optimizer_name == "adamw")  // decay large enough to shape the weights
    optimizer = std::make_unique<::torch::optim::AdamW>(
        model->parameters(), ::torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  else if (optimizer_name == "lamb")
    optimizer = std::make_unique<optim::Lamb>(model->parameters(), optim::LambOptions(0.01));
  else
    optimizer = std::make_unique<::torch::optim::SGD>(
        model->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
  DistributedOptimizer dist(*optimizer, *model,
                            {.compression = compression,
                             .powersgd = {.rank = 2, .warmup_steps = 5},
                             .onebit = {.warmup_steps = 5},
                             .onebit_adam = {.warmup_steps = 20},
                             .onebit_lamb = {.warmup_steps = 20},
                             .name_prefix = fmt::format("train{}.{}", static_cast<int>(compression),
                                                        optimizer_name)});
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

TEST(Compression, PowerSGDAndOneBitTrainAsWellAsUncompressedAllreduce) {
  run_torch_workers(2, [] {
    const double none = train_accuracy(Compression::kNone);
    const double psgd = train_accuracy(Compression::kPowerSGD);
    const double onebit = train_accuracy(Compression::kOneBit);
    EXPECT_GE(none, 0.9);
    EXPECT_GE(psgd, 0.9);
    EXPECT_GE(psgd, none - 0.03) << "uncompressed " << none;
    EXPECT_GE(onebit, 0.9);
    EXPECT_GE(onebit, none - 0.03) << "uncompressed " << none;
    if (rank() == 0)
      std::printf("test accuracy: %.4f uncompressed, %.4f PowerSGD r=2, %.4f 1-bit\n", none, psgd,
                  onebit);
  });
}

// 1-bit Adam or LAMB against the optimizer it wraps, uncompressed.
void expect_trains_like_uncompressed(Compression onebit_kind, const std::string& optimizer) {
  run_torch_workers(2, [&] {
    const double plain = train_accuracy(Compression::kNone, optimizer);
    const double onebit = train_accuracy(onebit_kind, optimizer);
    EXPECT_GE(plain, 0.9);
    EXPECT_GE(onebit, 0.9);
    EXPECT_GE(onebit, plain - 0.03) << "plain " << optimizer << " " << plain;
    if (rank() == 0)
      std::printf("test accuracy: %.4f %s, %.4f 1-bit %s\n", plain, optimizer.c_str(), onebit,
                  optimizer.c_str());
  });
}

TEST(OneBitAdam, TrainsAsWellAsAdam) {
  expect_trains_like_uncompressed(Compression::kOneBitAdam, "adam");
}

TEST(OneBitAdam, OverAdamWTrainsAsWellAsAdamW) {
  expect_trains_like_uncompressed(Compression::kOneBitAdam, "adamw");
}

TEST(OneBitLamb, TrainsAsWellAsLamb) {
  expect_trains_like_uncompressed(Compression::kOneBitLamb, "lamb");
}


}  // namespace
}  // namespace lockstep::torch
