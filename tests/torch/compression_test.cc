// Issue 45.7: the wire compressors as values (compression.h) round-trip,
// and a program's own allreduce of compressed gradients equals what
// DistributedOptimizer computes with that compression.
#include <gmock/gmock.h>

#include "lockstep/base/error.h"
#include "lockstep/torch/compression.h"
#include "torch/helpers.h"

namespace lockstep::torch {
namespace {

using testing::make_mlp;
using testing::run_torch_workers;
using ::torch::Tensor;

TEST(Compressor, RoundTripsWithinTheWireTypesPrecision) {
  auto x = ::torch::randn({1000}, ::torch::kFloat64);
  for (auto [c, wire, tol] : {std::tuple{Compression::kNone, ::torch::kFloat64, 0.0},
                              std::tuple{Compression::kFp16, ::torch::kFloat16, 1e-3},
                              std::tuple{Compression::kBf16, ::torch::kBFloat16, 8e-3}}) {
    auto [sent, ctx] = Compressor::of(c).compress(x);
    EXPECT_EQ(sent.scalar_type(), wire);
    auto back = Compressor::of(c).decompress(sent, ctx);
    EXPECT_EQ(back.scalar_type(), ::torch::kFloat64);
    // Relative error of one rounding to the wire type's mantissa.
    EXPECT_LE(((back - x).abs() / x.abs().clamp_min(1e-3)).max().item<double>(), tol);
  }
  EXPECT_THROW(Compressor::of(Compression::kPowerSGD), InvalidArgument);
}

// Horovod's test_compression_fp16: integer tensors are not compressed (a
// half cast would turn 70000 into -2147483648 on the way back).
TEST(Compressor, LeavesIntegerTensorsAsTheyAre) {
  for (Compression c : {Compression::kFp16, Compression::kBf16})
    for (auto dtype :
         {::torch::kUInt8, ::torch::kInt8, ::torch::kInt16, ::torch::kInt32, ::torch::kInt64}) {
      Tensor x = ::torch::full(
          {3}, dtype == ::torch::kUInt8 || dtype == ::torch::kInt8 ? 100 : 30000, dtype);
      if (dtype == ::torch::kInt32 || dtype == ::torch::kInt64) x.fill_(70000);
      auto [sent, ctx] = Compressor::of(c).compress(x);
      EXPECT_EQ(sent.scalar_type(), dtype);
      EXPECT_TRUE(Compressor::of(c).decompress(sent, ctx).equal(x)) << c10::toString(dtype);
    }
}

// What the optimizer reduces equals compress(grad / size), lt::allreduce
// (sum), decompress: bit for bit, since it is the same code.
TEST(Compressor, OwnAllreduceEqualsDistributedOptimizer) {
  run_torch_workers(2, [] {
    for (Compression c : {Compression::kFp16, Compression::kBf16}) {
      auto model = make_mlp(5);
      ::torch::optim::SGD sgd(model->parameters(), 0.1);
      DistributedOptimizer dist(sgd, *model, {.compression = c, .overlap = Overlap::kOff});
      ::torch::manual_seed(10 + rank());  // different data per rank
      dist.zero_grad();
      model->forward(::torch::randn({4, 8})).pow(2).sum().backward();
      std::vector<::torch::Tensor> expected;
      for (const auto& item : model->named_parameters()) {
        auto [wire, ctx] = Compressor::of(c).compress(item.value().grad() / size());
        wire = allreduce(wire, "own." + item.key(), {.op = ReduceOp::kSum});
        expected.push_back(Compressor::of(c).decompress(wire, ctx));
      }
      dist.synchronize();
      size_t i = 0;
      for (const auto& p : model->parameters()) {
        EXPECT_TRUE(::torch::equal(p.grad(), expected[i])) << i;
        EXPECT_EQ(p.grad().scalar_type(), ::torch::kFloat32);
        ++i;
      }
    }
  });
}

}  // namespace
}  // namespace lockstep::torch
