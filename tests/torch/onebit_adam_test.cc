// 1-bit Adam (onebit_adam.h) through DistributedOptimizer at 2 ranks: its
// warm-up steps are bitwise those of plain distributed Adam, and over AdamW
// those of plain distributed AdamW; over AdamW every step, in the warm-up
// and after it, is the same run's step over Adam plus AdamW's decoupled
// decay; elements with
// no gradient in the warm-up stay put after it, and elements with a tiny
// one step no further than Adam's bound (Note [1-bit step bound]); the
// bytes handed to the communicator per step are the closed form's
// (lockstep/policy/compression.h), against 4L for the uncompressed steps, and
// so are 1-bit LAMB's (onebit_lamb.h; its own tests in onebit_lamb_test.cc);
// the planner's bytes for the same model equal the runtime's traffic
// counters for none, PowerSGD, 1-bit, 1-bit Adam and 1-bit LAMB; bad
// options get named errors. (compression_test.cc trains a classifier with
// them.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "lockstep/base/error.h"
#include "lockstep/comm/traffic.h"
#include "lockstep/optim/lamb.h"
#include "lockstep/policy/compression.h"
#include "lockstep/torch/distributed_optimizer.h"
#include "torch/helpers.h"
#include "torch/onebit_warmup.h"

namespace lockstep::torch {
namespace {

using testing::run_torch_workers;
using ::torch::Tensor;
namespace nn = ::torch::nn;

void check_warmup_is_plain_adam() {
  testing::check_warmup_is_plain(
      {.compression = Compression::kOneBitAdam, .onebit_adam = {.warmup_steps = 3}}, 3,
      [](std::vector<Tensor> params) {
        return std::make_unique<::torch::optim::Adam>(std::move(params),
                                                      ::torch::optim::AdamOptions(0.01));
      });
}

void check_warmup_is_plain_adamw() {
  testing::check_warmup_is_plain(
      {.compression = Compression::kOneBitAdam, .onebit_adam = {.warmup_steps = 3}}, 3,
      [](std::vector<Tensor> params) {
        return std::make_unique<::torch::optim::AdamW>(
            std::move(params), ::torch::optim::AdamWOptions(0.01).weight_decay(0.1));
      });
}

// Gradients of rank and step alone (not of the parameters) for `model`.
void set_fixed_gradients(::torch::nn::Sequential& model, int step) {
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    auto g = ::torch::make_generator<at::CPUGeneratorImpl>(700 * step + 10 * i + rank());
    params[i].mutable_grad() = ::torch::randn(params[i].sizes(), g);
  }
}

// AdamW's step is p(1 − lr wd) plus Adam's step from the same state. With
// gradients that do not depend on the parameters, 1-bit Adam over Adam
// (no decay) and over AdamW keep equal momenta and variances, so equal
// compressed means, and each AdamW step must be the decay plus the Adam
// run's step, in the warm-up (torch's AdamW) and after it (1-bit Adam's).
// Weight decay left out of the compressed stage, or folded into the momentum
// as L2, moves AdamW's parameters by ~lr wd |p| = 1e-3 from this.
void check_adamw_is_adam_with_decoupled_decay() {
  constexpr double kLr = 0.01, kDecay = 0.5;
  auto plain = testing::onebit_model();
  auto decayed = testing::onebit_model();
  ::torch::optim::Adam adam(plain->parameters(), ::torch::optim::AdamOptions(kLr));
  ::torch::optim::AdamW adamw(decayed->parameters(),
                              ::torch::optim::AdamWOptions(kLr).weight_decay(kDecay));
  OneBitAdam over_adam(adam, {.warmup_steps = 3}, Group(), "decay.adam");
  OneBitAdam over_adamw(adamw, {.warmup_steps = 3}, Group(), "decay.adamw");
  const auto pa = plain->parameters(), pw = decayed->parameters();
  for (int step = 0; step < 8; ++step) {
    const bool compressed = over_adam.compressing();
    ASSERT_EQ(over_adamw.compressing(), compressed) << "step " << step;
    set_fixed_gradients(plain, step);
    set_fixed_gradients(decayed, step);
    if (!compressed) {
      testing::average_gradients(plain);
      testing::average_gradients(decayed);
    }
    std::vector<Tensor> before_a, before_w;
    for (size_t i = 0; i < pa.size(); ++i) {
      before_a.push_back(pa[i].detach().clone());
      before_w.push_back(pw[i].detach().clone());
    }
    over_adam.step();
    over_adamw.step();
    for (size_t i = 0; i < pa.size(); ++i) {
      const Tensor expected = before_w[i] * (1 - kLr * kDecay) + (pa[i].detach() - before_a[i]);
      EXPECT_TRUE(::torch::allclose(pw[i].detach(), expected, 0, 1e-6))
          << "step " << step << " parameter " << i << ": off by "
          << (pw[i].detach() - expected).abs().max().item<double>();
    }
  }
  EXPECT_TRUE(over_adamw.compressing());
}

// Payload bytes handed to the communicator by one step() (synchronize and
// update) of each kind, on the wide model, at the second compressed step.
nn::Sequential traffic_model() {
  ::torch::manual_seed(4);
  return nn::Sequential(nn::Linear(512, 384), nn::Tanh(), nn::Linear(384, 256), nn::Tanh(),
                        nn::Linear(256, 10));
}

// Adam, or LAMB for onebit-lamb.
comm::Traffic step_traffic(const std::string& compression, int step_to_measure) {
  auto model = traffic_model();
  std::unique_ptr<::torch::optim::Optimizer> optimizer;
  if (compression == "onebit-lamb")
    optimizer = std::make_unique<optim::Lamb>(model->parameters(), optim::LambOptions(1e-3));
  else
    optimizer = std::make_unique<::torch::optim::Adam>(model->parameters(),
                                                       ::torch::optim::AdamOptions(1e-3));
  DistributedOptimizerOptions o{
      .name_prefix = "t." + compression, .overlap = Overlap::kOff, .fingerprint_every = 0};
  set_compression(o, compression);
  o.onebit_adam.warmup_steps = 2;
  o.onebit_lamb.warmup_steps = 2;
  DistributedOptimizer dist(*optimizer, *model, o);
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(20 + rank());
  comm::Traffic measured;
  for (int step = 0; step <= step_to_measure; ++step) {
    dist.zero_grad();
    model->forward(::torch::randn({8, 512}, g)).square().mean().backward();
    const comm::Traffic before = comm::traffic();
    dist.step();
    measured = comm::traffic() - before;
  }
  return measured;
}

std::vector<std::vector<int64_t>> wide_shapes() {
  std::vector<std::vector<int64_t>> shapes;
  for (auto& p : traffic_model()->parameters()) shapes.push_back(p.sizes().vec());
  return shapes;
}

// The planner's bytes (compressed_step) against the traffic counters. The
// engine's negotiation comes on top of the measured: a few header
// allreduces of 4 (3 + 3 ranks + cached names) bytes, under 1 KiB here,
// and, being allreduces at 2 ranks, as many wire bytes as payload bytes. So
// measured - planned is the same small number for both measures: a data
// collective the planner mis-sized (a 1-bit row is 2.3 KiB here) fails.
void check_planner_bytes_are_measured_bytes() {
  for (const std::string c : {"none", "powersgd:4", "onebit", "onebit-adam", "onebit-lamb"}) {
    const comm::Traffic m = step_traffic(c, 3);
    int64_t payload = 0, wire = 0;
    for (const auto& k : policy::compressed_step(policy::parse_compression(c), wide_shapes(), 2)) {
      payload += k.payload_bytes;
      wire += k.wire_bytes;
    }
    const int64_t negotiation = static_cast<int64_t>(m.payload_bytes) - payload;
    EXPECT_GE(negotiation, 0) << c;
    EXPECT_LE(negotiation, 1024) << c;
    EXPECT_EQ(static_cast<int64_t>(m.wire_bytes) - wire, negotiation) << c;
    if (rank() == 0)
      std::printf("%-12s planner payload %lld B wire %lld B; measured payload %llu B wire %llu B\n",
                  c.c_str(), static_cast<long long>(payload), static_cast<long long>(wire),
                  static_cast<unsigned long long>(m.payload_bytes),
                  static_cast<unsigned long long>(m.wire_bytes));
  }
  // 1-bit Adam's and LAMB's warm-up step is an uncompressed one: 4L bytes.
  int64_t values = 0;
  for (const auto& s : wide_shapes()) values += c10::multiply_integers(s);
  for (const std::string c : {"onebit-adam", "onebit-lamb"}) {
    const comm::Traffic warm = step_traffic(c, 0);
    EXPECT_GE(warm.payload_bytes, static_cast<uint64_t>(4 * values)) << c;
    EXPECT_LE(static_cast<double>(warm.payload_bytes), 1.01 * 4.0 * static_cast<double>(values))
        << c;
    const comm::Traffic frozen = step_traffic(c, 3);
    const double factor = 4.0 * static_cast<double>(values) /
                          static_cast<double>(policy::onebit_payload_bytes(values, 2));
    EXPECT_NEAR(static_cast<double>(warm.payload_bytes) / static_cast<double>(frozen.payload_bytes),
                factor, 0.02 * factor)
        << c;
  }
}

void check_zero_variance_stays_put() {
  auto model = testing::onebit_model();
  ::torch::optim::Adam adam(model->parameters(), ::torch::optim::AdamOptions(0.01));
  OneBitAdam onebit(adam, {.warmup_steps = 3}, Group(), "dead");
  testing::check_zero_variance_stays_put(model, onebit);
}

// Adam's default betas: the bound is (1 − 0.9)/√(1 − 0.999) = 3.16 lr.
void check_tiny_variance_step_is_bounded() {
  auto model = testing::onebit_model();
  constexpr double kLr = 0.01;
  ::torch::optim::Adam adam(model->parameters(), ::torch::optim::AdamOptions(kLr));
  OneBitAdam onebit(adam, {.warmup_steps = 3}, Group(), "tiny");
  const double limit = kLr * adam_step_bound(0.9, 0.999);
  EXPECT_NEAR(limit, kLr * 0.1 / std::sqrt(0.001), 1e-12);
  testing::check_tiny_variance_step_is_bounded(model, onebit, [&](size_t) { return limit; });
}

void check_named_errors() {
  auto model = testing::onebit_model();
  ::torch::optim::SGD sgd(model->parameters(), 0.1);
  ::torch::optim::Adam adam(model->parameters(), ::torch::optim::AdamOptions(0.1));
  ::torch::optim::Adam ams(model->parameters(), ::torch::optim::AdamOptions(0.1).amsgrad(true));
  ::torch::optim::AdamW amsw(model->parameters(), ::torch::optim::AdamWOptions(0.1).amsgrad(true));
  const DistributedOptimizerOptions o{.compression = Compression::kOneBitAdam,
                                      .overlap = Overlap::kOff};
  auto message = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message([&] { DistributedOptimizer d(sgd, *model, o); }).find("torch::optim::Adam"),
            std::string::npos);
  EXPECT_NE(message([&] { DistributedOptimizer d(ams, *model, o); }).find("amsgrad"),
            std::string::npos);
  EXPECT_NE(message([&] { DistributedOptimizer d(amsw, *model, o); }).find("AdamW without amsgrad"),
            std::string::npos);
  auto zero_warmup = o;
  zero_warmup.onebit_adam.warmup_steps = 0;
  EXPECT_NE(
      message([&] { DistributedOptimizer d(adam, *model, zero_warmup); }).find("warmup_steps=0"),
      std::string::npos);
  auto sum = o;
  sum.op = ReduceOp::kSum;
  EXPECT_NE(message([&] { DistributedOptimizer d(adam, *model, sum); }).find("kAverage"),
            std::string::npos);
}

TEST(OneBitAdam, WarmupIsPlainAdamThenBytesFollowTheClosedFormAndThePlanner) {
  run_torch_workers(2, [] {
    check_named_errors();
    check_warmup_is_plain_adam();
    check_zero_variance_stays_put();
    check_tiny_variance_step_is_bounded();
    check_planner_bytes_are_measured_bytes();
  });
}

TEST(OneBitAdam, OverAdamWWarmupIsPlainAdamWThenAdamsStepPlusDecoupledDecay) {
  run_torch_workers(2, [] {
    check_warmup_is_plain_adamw();
    check_adamw_is_adam_with_decoupled_decay();
  });
}

}  // namespace
}  // namespace lockstep::torch
