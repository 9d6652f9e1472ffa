// Tensor parallelism against the dense model: the same seed gives the same
// full matrices, so forward outputs and every gradient (sliced) must equal
// the single-process dense computation. f64, relative tolerance 1e-10.
#include <gmock/gmock.h>

#include "lockstep/base/error.h"
#include "lockstep/parallel/mesh.h"
#include "lockstep/parallel/tensor_parallel.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

using lockstep::torch::testing::run_torch_workers;
namespace lt = lockstep::torch;
using ::torch::Tensor;

constexpr int64_t kIn = 6, kHidden = 10, kOut = 5, kBatch = 8;  // 10 = 3+3+2+2 on 4 ranks

double relative_error(const Tensor& actual, const Tensor& expected) {
  const double scale = std::max(expected.abs().max().item<double>(), 1e-300);
  return (actual - expected).abs().max().item<double>() / scale;
}

struct Batch {
  Tensor x, weights;  // loss = sum(output * weights): every output entry gets its own gradient
};

Batch make_batch(uint64_t seed) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(seed);
  auto options = ::torch::TensorOptions().dtype(::torch::kFloat64);
  return {::torch::randn({kBatch, kIn}, g, options), ::torch::randn({kBatch, kOut}, g, options)};
}

// Layers built one statement at a time: the order of arguments in one call
// is unspecified, and the first layer must draw from the generator first.
::torch::nn::Sequential dense_mlp(uint64_t seed) {
  ::torch::manual_seed(seed);
  ::torch::nn::Linear first(kIn, kHidden);
  ::torch::nn::Linear second(kHidden, kOut);
  return ::torch::nn::Sequential(first, ::torch::nn::Tanh(), second);
}

// The dense reference: output and the four gradients.
struct Dense {
  Tensor out, w1, b1, w2, b2, dx;
};

Dense run_dense(const Batch& b) {
  auto model = dense_mlp(11);
  auto x = b.x.clone().requires_grad_(true);
  auto out = model->forward(x);
  (out * b.weights).sum().backward();
  auto l1 = model[0]->as<::torch::nn::Linear>(), l2 = model[2]->as<::torch::nn::Linear>();
  return {out.detach(),      l1->weight.grad(), l1->bias.grad(),
          l2->weight.grad(), l2->bias.grad(),   x.grad()};
}

void expect_close(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_TRUE(actual.sizes().equals(expected.sizes()))
      << what << ": " << actual.sizes() << " vs " << expected.sizes();
  EXPECT_LE(relative_error(actual, expected), 1e-10) << what << " on rank " << lt::rank();
}

// ParallelMLP (copy_to + reduce_from) and a Column(gather) -> Row(scatter)
// pair (gather_from + scatter_to), both against the dense MLP.
void check_against_dense(const Group& group) {
  const int r = group.rank(), n = group.size();
  ::torch::set_default_dtype(caffe2::TypeMeta::Make<double>());
  Batch batch = make_batch(3);
  Dense dense = run_dense(batch);
  auto [h0, hn] = shard_range(kHidden, r, n);

  ::torch::manual_seed(11);
  ParallelMLPOptions options(kIn, kHidden, kOut);
  options.group = group;
  options.activation = [](const Tensor& h) { return ::torch::tanh(h); };
  ParallelMLP mlp(options);
  auto x = batch.x.clone().requires_grad_(true);
  auto out = mlp->forward(x);
  (out * batch.weights).sum().backward();
  expect_close(out.detach(), dense.out, "ParallelMLP output");
  expect_close(mlp->fc1->weight.grad(), dense.w1.narrow(0, h0, hn), "fc1.weight.grad");
  expect_close(mlp->fc1->bias.grad(), dense.b1.narrow(0, h0, hn), "fc1.bias.grad");
  expect_close(mlp->fc2->weight.grad(), dense.w2.narrow(1, h0, hn), "fc2.weight.grad");
  expect_close(mlp->fc2->bias.grad(), dense.b2, "fc2.bias.grad");
  expect_close(x.grad(), dense.dx, "input grad");

  // The full state gathers to the dense model's tensors and loads back.
  auto full = full_state_dict(*mlp);
  auto reference = dense_mlp(11);
  ASSERT_EQ(full.size(), 4u);
  expect_close(full[0].second, reference[0]->as<::torch::nn::Linear>()->weight.detach(),
               "full fc1.weight");
  expect_close(full[2].second, reference[2]->as<::torch::nn::Linear>()->weight.detach(),
               "full fc2.weight");
  {
    ::torch::NoGradGuard no_grad;
    mlp->fc1->weight.zero_();
    mlp->fc2->weight.zero_();
  }
  load_full_state_dict(*mlp, full);
  expect_close(mlp->fc2->weight.detach(), full[2].second.narrow(1, h0, hn), "reloaded fc2.weight");

  ::torch::manual_seed(11);
  ColumnParallelLinearOptions first(kIn, kHidden);
  first.group = group;
  first.gather_output = true;
  RowParallelLinearOptions second(kHidden, kOut);
  second.group = group;
  second.input_is_parallel = false;
  ColumnParallelLinear column(first);
  RowParallelLinear row(second);
  auto x2 = batch.x.clone().requires_grad_(true);
  auto out2 = row->forward(::torch::tanh(column->forward(x2)));
  (out2 * batch.weights).sum().backward();
  expect_close(out2.detach(), dense.out, "gather/scatter output");
  expect_close(column->weight.grad(), dense.w1.narrow(0, h0, hn), "column weight grad");
  expect_close(row->weight.grad(), dense.w2.narrow(1, h0, hn), "row weight grad");
  expect_close(x2.grad(), dense.dx, "gather/scatter input grad");
  ::torch::set_default_dtype(caffe2::TypeMeta::Make<float>());
}

TEST(TensorParallel, SingleProcessEqualsDense) { check_against_dense(Group()); }

TEST(TensorParallel, TwoRanksEqualDense) {
  run_torch_workers(2, [] { check_against_dense(Group()); });
}

// Four ranks on two cores (oversubscribed), hidden 10 split 3+3+2+2.
TEST(TensorParallel, FourRanksEqualDenseWithUnevenShards) {
  run_torch_workers(4, [] { check_against_dense(Group()); });
}

// data=2 x tensor=2: each data replica takes half the batch, the tensor ranks
// of a replica share it; DistributedOptimizer averages over the data group.
// One SGD step equals the dense single-process step on the whole batch.
TEST(TensorParallel, DataByTensorOnFourRanksMatchesLargeBatch) {
  run_torch_workers(4, [] {
    ::torch::set_default_dtype(caffe2::TypeMeta::Make<double>());
    Mesh mesh = Mesh::parse("data=2,tensor=2");
    Batch batch = make_batch(8);
    auto dense = dense_mlp(11);
    ::torch::optim::SGD dense_sgd(dense->parameters(), 0.1);
    (dense->forward(batch.x) * batch.weights).sum().div(kBatch).backward();
    dense_sgd.step();

    ::torch::manual_seed(11);
    ParallelMLPOptions options(kIn, kHidden, kOut);
    options.group = mesh.group("tensor");
    options.activation = [](const Tensor& h) { return ::torch::tanh(h); };
    ParallelMLP mlp(options);
    ::torch::optim::SGD sgd(mlp->parameters(), 0.1);
    lt::DistributedOptimizer dist(sgd, *mlp, {.group = mesh.group("data")});
    const int64_t half = kBatch / 2, d = mesh.coordinate("data");
    dist.zero_grad();
    (mlp->forward(batch.x.narrow(0, d * half, half)) * batch.weights.narrow(0, d * half, half))
        .sum()
        .div(half)
        .backward();
    dist.step();
    auto [h0, hn] = shard_range(kHidden, mesh.coordinate("tensor"), 2);
    auto l1 = dense[0]->as<::torch::nn::Linear>(), l2 = dense[2]->as<::torch::nn::Linear>();
    expect_close(mlp->fc1->weight.detach(), l1->weight.detach().narrow(0, h0, hn), "fc1.weight");
    expect_close(mlp->fc1->bias.detach(), l1->bias.detach().narrow(0, h0, hn), "fc1.bias");
    expect_close(mlp->fc2->weight.detach(), l2->weight.detach().narrow(1, h0, hn), "fc2.weight");
    expect_close(mlp->fc2->bias.detach(), l2->bias.detach(), "fc2.bias");
    ::torch::set_default_dtype(caffe2::TypeMeta::Make<float>());
  });
}

TEST(TensorParallel, ShardRangesCoverEveryFeatureOnce) {
  for (int n = 1; n <= 5; ++n) {
    int64_t next = 0;
    for (int r = 0; r < n; ++r) {
      auto [begin, length] = shard_range(10, r, n);
      EXPECT_EQ(begin, next);
      next += length;
    }
    EXPECT_EQ(next, 10);
  }
  EXPECT_THROW(shard_range(10, 2, 2), InvalidArgument);
}

TEST(TensorParallel, RowRejectsAnInputOfTheWrongWidth) {
  RowParallelLinear row(RowParallelLinearOptions(4, 2));
  EXPECT_THAT(
      [&] {
        row->forward(::torch::ones({1, 3}));
      },
      ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr("has 3 features")));
}

}  // namespace
}  // namespace lockstep::parallel
