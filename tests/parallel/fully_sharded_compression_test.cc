// FullyShardedModel with gradient compression (reduce_dtype = bf16 / fp16)
// against data parallelism with DistributedOptimizer's Compression::kBf16 /
// kFp16 on whole replicas: bitwise the same parameters after K Adam steps
// (the rounding happens at the same places: each rank's share, then the sum), at
// 2 ranks sharded and as HSDP (one-rank shards, two replicas); the reduce-
// scatter's payload halves (comm::traffic); ShardedOptimizer (ZeRO-1/2)
// with reduce_dtype likewise bitwise; PowerSGD, 1-bit and a non-floating
// reduce_dtype are refused by name.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include "lockstep/base/error.h"
#include "lockstep/comm/traffic.h"
#include "lockstep/parallel/fully_sharded.h"
#include "lockstep/parallel/mesh.h"
#include "parallel/fsdp_helpers.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

using lockstep::torch::testing::flat_parameters;
using lockstep::torch::testing::run_torch_workers;
using testing::local_batch;
using testing::relative_error;
namespace lt = lockstep::torch;
using lt::Compression;
using ::torch::Tensor;

constexpr int kSteps = 8;

::torch::nn::Sequential make_model(int64_t width = 40) {
  ::torch::manual_seed(3);
  return ::torch::nn::Sequential(::torch::nn::Linear(8, width), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(width, 24), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(24, 4));
}

Tensor train_data_parallel(Compression compression) {
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.01);
  lt::DistributedOptimizer dist(
      adam, *model,
      {.compression = compression,
       .name_prefix = fmt::format("dp{}", static_cast<int>(compression))});
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = local_batch(s);
    dist.zero_grad();
    ::torch::nn::functional::mse_loss(model->forward(x), y).backward();
    dist.step();
  }
  return flat_parameters(*model);
}

Tensor whole_parameters(FullyShardedModel& fsdp) {
  fsdp.gather_full();
  Tensor flat = flat_parameters(*fsdp.module()).clone();
  fsdp.release_full();
  return flat;
}

Tensor train_fsdp(FullyShardedOptions options) {
  FullyShardedModel fsdp(make_model(), options);
  ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = local_batch(s);
    fsdp.zero_grad();
    ::torch::nn::functional::mse_loss(fsdp.forward(x), y).backward();
    fsdp.step(adam);
  }
  return whole_parameters(fsdp);
}

// Sharded (group of every rank) or HSDP (shards of one rank, replicated).
FullyShardedOptions options_for(Compression compression, bool hybrid, const Mesh& mesh) {
  FullyShardedOptions o{.layers_per_unit = 2};
  o.reduce_dtype = fsdp_reduce_dtype(compression);
  o.name = fmt::format("fsdp{}{}", static_cast<int>(compression), hybrid ? "h" : "s");
  if (hybrid) {
    o.group = mesh.group("shard");
    o.replicate = mesh.group("replicate");
  }
  return o;
}

void check_follows_data_parallel_compression(bool hybrid) {
  Mesh mesh({{"replicate", lt::size()}, {"shard", 1}});
  const Tensor plain = train_fsdp(options_for(Compression::kNone, hybrid, mesh));
  for (Compression c : {Compression::kBf16, Compression::kFp16}) {
    const Tensor expected = train_data_parallel(c);
    const Tensor actual = train_fsdp(options_for(c, hybrid, mesh));
    const double error = relative_error(actual, expected);
    // Bitwise at 2 ranks: each share rounded once, one addition rounded once,
    // in both (within 1e-6 is the FSDP tests' f32 tolerance, for other orders).
    EXPECT_EQ(error, 0.0) << "compression " << static_cast<int>(c) << (hybrid ? " HSDP" : "");
    // The compression took place: uncompressed FSDP lands elsewhere.
    EXPECT_GT(relative_error(plain, expected), 1e-5) << static_cast<int>(c);
    if (lt::rank() == 0)
      std::printf("%s %s: relative error vs DistributedOptimizer %.3g, vs uncompressed %.3g\n",
                  hybrid ? "HSDP" : "FSDP", c == Compression::kBf16 ? "bf16" : "fp16", error,
                  relative_error(plain, expected));
  }
}

// Payload bytes of one step (forward, backward, step: the all-gathers are
// f32 in both runs, only the reduce-scatter's input changes dtype), on a
// model wide enough (33k parameters) that the engine's negotiation messages,
// whose count varies with timing by a few hundred bytes, stay under 1%.
uint64_t step_payload(std::optional<::torch::ScalarType> reduce_dtype, const std::string& name,
                      int64_t* padded) {
  FullyShardedModel fsdp(make_model(1000),
                         {.layers_per_unit = 2, .reduce_dtype = reduce_dtype, .name = name});
  ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
  *padded = fsdp.shard_elements() * lt::size();
  uint64_t bytes = 0;
  for (int s = 0; s < 2; ++s) {  // the second step: negotiation cached
    auto [x, y] = local_batch(s);
    const comm::Traffic before = comm::traffic();
    fsdp.zero_grad();
    ::torch::nn::functional::mse_loss(fsdp.forward(x), y).backward();
    fsdp.step(adam);
    bytes = (comm::traffic() - before).payload_bytes;
  }
  return bytes;
}

void check_reduce_scatter_bytes_halve() {
  int64_t padded = 0;
  const auto f32 = static_cast<double>(step_payload(std::nullopt, "bytesA", &padded));
  const auto bf16 = static_cast<double>(step_payload(::torch::kBFloat16, "bytesB", &padded));
  // The reduce-scatter's input: 4 bytes per padded element, then 2.
  const double saved = 2.0 * static_cast<double>(padded);
  EXPECT_NEAR(f32 - bf16, saved, 0.02 * saved) << f32 << " vs " << bf16;
  if (lt::rank() == 0)
    std::printf(
        "payload per step: %.0f B uncompressed, %.0f B bf16 (saved %.0f, closed form %.0f)\n", f32,
        bf16, f32 - bf16, saved);
}

// ZeRO-1/2 with reduce_dtype against the same DistributedOptimizer runs.
Tensor train_zero(Compression compression, int stage) {
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.01);
  ShardedOptimizer zero(adam, *model,
                        {.stage = stage,
                         .reduce_dtype = fsdp_reduce_dtype(compression),
                         .name = fmt::format("zero{}.{}", static_cast<int>(compression), stage)});
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = local_batch(s);
    zero.zero_grad();
    ::torch::nn::functional::mse_loss(model->forward(x), y).backward();
    zero.step();
  }
  return flat_parameters(*model);
}

void check_zero_follows_data_parallel_compression() {
  for (int stage : {1, 2}) {
    const Tensor plain = train_zero(Compression::kNone, stage);
    for (Compression c : {Compression::kBf16, Compression::kFp16}) {
      const Tensor expected = train_data_parallel(c);
      EXPECT_EQ(relative_error(train_zero(c, stage), expected), 0.0)
          << "ZeRO-" << stage << " compression " << static_cast<int>(c);
      EXPECT_GT(relative_error(plain, expected), 1e-5) << static_cast<int>(c);
    }
  }
}

void check_refusals() {
  EXPECT_EQ(fsdp_reduce_dtype(Compression::kNone), std::nullopt);
  EXPECT_EQ(fsdp_reduce_dtype(Compression::kBf16), ::torch::kBFloat16);
  EXPECT_EQ(fsdp_reduce_dtype(Compression::kFp16), ::torch::kHalf);
  for (auto [c, scheme] : {std::pair{Compression::kPowerSGD, "PowerSGD"},
                           std::pair{Compression::kOneBit, "1-bit compression"},
                           std::pair{Compression::kOneBitAdam, "1-bit Adam"},
                           std::pair{Compression::kOneBitLamb, "1-bit LAMB"}})
    EXPECT_THAT([c = c] { fsdp_reduce_dtype(c); },
                ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr(scheme)));
  EXPECT_THAT([] { FullyShardedModel(make_model(), {.reduce_dtype = ::torch::kInt}); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  ::testing::HasSubstr("reduce_dtype Int is not a floating type")));
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.01);
  EXPECT_THAT([&] { ShardedOptimizer(adam, *model, {.reduce_dtype = ::torch::kLong}); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  ::testing::HasSubstr("ShardedOptimizer: reduce_dtype Long")));
}

TEST(FullyShardedCompression, Bf16AndFp16FollowDataParallelismWithTheSameCompression) {
  run_torch_workers(2, [] {
    check_follows_data_parallel_compression(false);
    check_follows_data_parallel_compression(true);
  });
}

TEST(FullyShardedCompression, ZeroStagesOneAndTwoFollowDataParallelismWithTheSameCompression) {
  run_torch_workers(2, [] { check_zero_follows_data_parallel_compression(); });
}

TEST(FullyShardedCompression, ReduceScatterBytesHalveWithBf16) {
  run_torch_workers(2, [] { check_reduce_scatter_bytes_halve(); });
}

TEST(FullyShardedCompression, PowerSGDAndOneBitAreRefusedByName) {
  run_torch_workers(1, [] { check_refusals(); });
}

}  // namespace
}  // namespace lockstep::parallel
