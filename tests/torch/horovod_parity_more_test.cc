// Horovod parity, the rest of issue 45 (items 8 and the sparse part of 5):
// Adasum's stability cutoff, alltoall's received splits, grouped allgather
// and reduce-scatter, sparse allreduce. Expected values are Horovod's
// (test/parallel/test_adasum_pytorch.py, test_torch.py), computed here
// without communication from what every rank holds.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <cfloat>
#include <cmath>
#include <functional>

#include "engine/engine_harness.h"
#include "lockstep/base/error.h"
#include "lockstep/torch/adasum.h"
#include "lockstep/torch/distributed_optimizer.h"
#include "torch/helpers.h"

namespace lockstep::torch {
// Named, not anonymous: the target is a unity build with horovod_parity_test.cc.
namespace parity_more {

using testing::run_torch_workers;
using ::torch::Tensor;

void expect_invalid(const std::function<void()>& call, const std::string& substring) {
  lockstep::testing::expect_throw_with<InvalidArgument>(call, {substring});
}

// ---- Adasum's stability (test_stability, test_stability_2)

// Horovod's are_close: |expected - got| / |expected| / 100 below the dtype's eps.
double diff_ratio(const Tensor& expected, const Tensor& got) {
  return ((expected - got.to(::torch::kDouble)).norm() / expected.norm()).item<double>() / 100;
}

double eps_of(::torch::ScalarType dtype) {
  return dtype == ::torch::kFloat32 ? FLT_EPSILON : 0.0009765625;  // np.finfo(float16).eps
}

double tiny_of(::torch::ScalarType dtype) {
  return dtype == ::torch::kFloat32 ? FLT_MIN : 6.103515625e-05;  // np.finfo(float16).tiny
}

double max_of(::torch::ScalarType dtype) { return dtype == ::torch::kFloat32 ? FLT_MAX : 65504.0; }

// q[:, r] for every rank r ([1024, size], double): the rank's vector, already
// rounded to dtype. The vectors are parallel (one direction a, a per-rank
// scale), so Adasum must give their average.
Tensor parallel_columns(::torch::ScalarType dtype, int n, bool wide_range) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(2);
  Tensor a = ::torch::randn({1024, 1}, g, ::torch::kDouble);
  Tensor r;
  if (!wide_range) {  // test_stability: a ~ N(0, tiny), r ~ N(0, 1)
    a = a * tiny_of(dtype);
    r = ::torch::randn({n}, g, ::torch::kDouble);
  } else {  // test_stability_2: scales from tiny to sqrt(max), shuffled
    const double lo = tiny_of(dtype), hi = std::sqrt(max_of(dtype));
    std::vector<double> scales;
    for (int i = 0; i < n; ++i)
      scales.push_back(std::pow(hi, double(i + 1) / n) * std::pow(lo, double(n - i - 1) / n));
    r = ::torch::tensor(scales, ::torch::kDouble).index({::torch::randperm(n, g)});
  }
  return (a * r.unsqueeze(0)).to(dtype).to(::torch::kDouble);
}

void adasum_stability(bool wide_range) {
  for (auto dtype : {::torch::kFloat32, ::torch::kFloat16}) {
    Tensor q = parallel_columns(dtype, size(), wide_range);
    std::vector<Tensor> mine = {q.select(1, rank()).to(dtype).contiguous()};
    adasum_allreduce_(mine, fmt::format("stability.{}", c10::toString(dtype)));
    Tensor expected = q.sum(1) / size();
    EXPECT_LT(diff_ratio(expected, mine[0]), eps_of(dtype))
        << c10::toString(dtype) << " wide_range " << wide_range << " rank " << rank();
  }
}

// Horovod refuses worlds that are not a power of two; 2 and 4 ranks.
TEST(HorovodParityMore, AdasumAveragesTinyParallelGradientsLikeHorovod) {
  for (int n : {2, 4}) run_torch_workers(n, [] { adasum_stability(false); });
}

TEST(HorovodParityMore, AdasumAveragesParallelGradientsOverTheWholeRange) {
  for (int n : {2, 4}) run_torch_workers(n, [] { adasum_stability(true); });
}

// The cutoff is sqrt(DBL_MIN): a squared norm of 1e-20 is averaged, an
// all-zero vector keeps coefficient 1 (no division by zero).
TEST(HorovodParityMore, AdasumPairCutoffIsSqrtDblMin) {
  Tensor x = ::torch::full({4}, 5e-11, ::torch::kDouble);  // |x|^2 = 1e-20
  EXPECT_TRUE(::torch::allclose(adasum_pair(x, x), x, 1e-12, 0)) << adasum_pair(x, x);
  Tensor zero = ::torch::zeros({4}, ::torch::kDouble);
  EXPECT_TRUE(adasum_pair(zero, x).equal(x));
}

// ---- alltoall returns the received splits (test_horovod_alltoall)

void alltoall_splits(bool with_grad) {
  const int n = size(), me = rank();
  // me + 1 rows to every rank, each row holding its destination's rank.
  std::vector<float> values;
  for (int dest = 0; dest < n; ++dest) values.insert(values.end(), me + 1, float(dest));
  Tensor input = ::torch::tensor(values).view({-1, 1});
  if (with_grad) input.requires_grad_();
  std::vector<int64_t> splits(n, me + 1);
  AlltoallResult r = alltoall_with_splits(input, splits, with_grad ? "a2a.grad" : "a2a");
  std::vector<int64_t> want;
  for (int src = 0; src < n; ++src) want.push_back(src + 1);
  EXPECT_EQ(r.received_splits, want);
  EXPECT_EQ(r.output.numel(), n * (n + 1) / 2);
  EXPECT_TRUE(r.output.eq(me).all().item<bool>()) << r.output;
  if (with_grad) {
    r.output.sum().backward();
    EXPECT_TRUE(input.grad().equal(::torch::ones_like(input)));
  }
  // The async form's handle gives them too.
  TensorHandle h = alltoall_async(input.detach(), splits, "a2a.async");
  EXPECT_EQ(h.received_splits(), want);
}

TEST(HorovodParityMore, AlltoallReturnsTheReceivedSplits) {
  for (int n : {1, 2, 3})
    run_torch_workers(n, [] {
      alltoall_splits(false);
      alltoall_splits(true);
    });
}

// ---- grouped_allgather / grouped_reduce_scatter

// Tensor k of rank r: r + 1 rows of 3, values 10 k + r.
Tensor gather_input(int r, int k) { return ::torch::full({r + 1, 3}, 10.0 * k + r); }

void grouped_allgather_matches_concatenation() {
  const int n = size();
  std::vector<Tensor> mine;
  std::vector<std::string> names;
  for (int k = 0; k < 4; ++k) {
    mine.push_back(gather_input(rank(), k).requires_grad_());
    names.push_back(fmt::format("gag.{}", k));
  }
  std::vector<Tensor> got;
  {
    ::torch::NoGradGuard no_grad;
    got = grouped_allgather(mine, names);
  }
  ASSERT_EQ(got.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    std::vector<Tensor> parts;
    for (int r = 0; r < n; ++r) parts.push_back(gather_input(r, k));
    EXPECT_TRUE(got[k].equal(::torch::cat(parts))) << k << "\n" << got[k];
  }
  // Differentiable: d(sum of every gathered row)/dx = size (summed over ranks).
  for (auto& name : names) name += ".g";
  std::vector<Tensor> with_grad = grouped_allgather(mine, names);
  ::torch::stack({with_grad[0].sum(), with_grad[3].sum()}).sum().backward();
  EXPECT_TRUE(mine[0].grad().equal(::torch::full({rank() + 1, 3}, double(n))));
  // One autograd function for the group, as Horovod's: an unused member's
  // gradient is zero (the gradient allreduce runs for the whole group).
  EXPECT_TRUE(mine[1].grad().equal(::torch::zeros({rank() + 1, 3})));
}

Tensor scatter_input(int r, int k, int n) {
  return (::torch::arange(4 * n * 2, ::torch::kFloat32).view({4 * n, 2}) * (r + 1) + k) - 7;
}

void grouped_reduce_scatter_matches_slices() {
  const int n = size();
  std::vector<Tensor> mine;
  std::vector<std::string> names;
  for (int k = 0; k < 3; ++k) {
    mine.push_back(scatter_input(rank(), k, n));
    names.push_back(fmt::format("grs.{}", k));
  }
  std::vector<Tensor> sums = grouped_reduce_scatter(mine, names, {.op = ReduceOp::kSum});
  for (auto& name : names) name += ".avg";
  std::vector<Tensor> avgs = grouped_reduce_scatter(mine, names);
  for (int k = 0; k < 3; ++k) {
    Tensor total = ::torch::zeros({4 * n, 2});
    for (int r = 0; r < n; ++r) total += scatter_input(r, k, n);
    Tensor slice = total.narrow(0, 4 * rank(), 4);
    EXPECT_TRUE(sums[k].equal(slice)) << k << "\n" << sums[k];
    EXPECT_TRUE(::torch::allclose(avgs[k], slice / n)) << k << "\n" << avgs[k];
  }
  expect_invalid([&] { grouped_reduce_scatter(mine, {"only.one"}); }, "3 tensors but 1 names");
}

// One handle for the group (Horovod's grouped_allgather_async /
// grouped_reducescatter_async), members of different dtypes, and the
// reduce-scatter's gradient: the allgather of the output's gradient.
void grouped_async_forms_complete_as_one() {
  const int n = size();
  std::vector<Tensor> mine = {gather_input(rank(), 0), gather_input(rank(), 1).to(::torch::kInt16)};
  TensorHandle gathered = grouped_allgather_async(mine, {"gaa.f32", "gaa.i16"});
  std::vector<Tensor> got = gathered.results();
  ASSERT_EQ(got.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    std::vector<Tensor> parts;
    for (int r = 0; r < n; ++r) parts.push_back(gather_input(r, k).to(mine[k].scalar_type()));
    EXPECT_TRUE(got[k].equal(::torch::cat(parts))) << k << "\n" << got[k];
  }
  EXPECT_FALSE(gathered.result().defined());  // a group's results are results()

  std::vector<Tensor> scatter = {scatter_input(rank(), 0, n), scatter_input(rank(), 1, n)};
  std::vector<Tensor> sums =
      grouped_reduce_scatter_async(scatter, {"grsa.0", "grsa.1"}, {.op = ReduceOp::kSum}).results();
  for (int k = 0; k < 2; ++k) {
    Tensor total = ::torch::zeros({4 * n, 2});
    for (int r = 0; r < n; ++r) total += scatter_input(r, k, n);
    EXPECT_TRUE(sums[k].equal(total.narrow(0, 4 * rank(), 4))) << k;
  }
  // d(sum of (rank + 1) * output_k)/d input_k = rank r's weight on rows of r.
  for (Tensor& t : scatter) t.requires_grad_();
  std::vector<Tensor> outs = grouped_reduce_scatter(scatter, {"grsg.0", "grsg.1"});
  ((outs[0] + 2 * outs[1]) * double(rank() + 1)).sum().backward();
  Tensor weights =
      ::torch::arange(1, n + 1, ::torch::kFloat32).repeat_interleave(4).view({4 * n, 1});
  EXPECT_TRUE(::torch::allclose(scatter[0].grad(), (weights / n).expand({4 * n, 2})))
      << scatter[0].grad();
  EXPECT_TRUE(::torch::allclose(scatter[1].grad(), (2 * weights / n).expand({4 * n, 2})))
      << scatter[1].grad();
}

// A group is submitted whole or not at all: a member invalid on rank 0
// alone (undefined) leaves nothing of the group pending there. Before, its
// valid first member was already submitted on rank 0 only and stayed
// pending, which remove_process_set then refused on every rank.
void an_invalid_member_submits_nothing() {
  if (size() < 2) return;  // needs a set of two ranks
  const int set = add_process_set({0, 1});
  if (rank() == 0)
    expect_invalid(
        [&] {
          grouped_allgather({::torch::ones({2}), Tensor()}, {"gx.0", "gx.1"}, set);
        },
        "undefined tensor");
  if (rank() == 1) {
    Tensor a = ::torch::ones({8});
    expect_invalid(
        [&] {
          grouped_reduce_scatter({a, a}, {"gy", "gy"}, {.process_set = set});
        },
        "already pending");
  }
  EXPECT_NO_THROW(remove_process_set(set));
}

TEST(HorovodParityMore, GroupedAllgatherAndReduceScatter) {
  for (int n : {1, 2, 3})
    run_torch_workers(n, [] {
      grouped_allgather_matches_concatenation();
      grouped_reduce_scatter_matches_slices();
      grouped_async_forms_complete_as_one();
      an_invalid_member_submits_nothing();
    });
}

// ---- sparse_allreduce (Horovod: allgather of indices and values)

// Rank r: rows r and r + 1 of a [5, 3] matrix, values r + 1 and 2 (r + 1).
Tensor sparse_input(int r) {
  Tensor indices =
      ::torch::tensor({int64_t(r), int64_t(r + 1), int64_t(0), int64_t(2)}).view({2, 2});
  Tensor values = ::torch::tensor({1.0f, 2.0f}) * float(r + 1);
  return ::torch::sparse_coo_tensor(indices, values, {5, 3});
}

void sparse_allreduce_matches_dense() {
  const int n = size();
  Tensor dense_sum = ::torch::zeros({5, 3});
  for (int r = 0; r < n; ++r) dense_sum += sparse_input(r).to_dense();
  Tensor sum = sparse_allreduce(sparse_input(rank()), "sp.sum", ReduceOp::kSum);
  Tensor avg = sparse_allreduce(sparse_input(rank()), "sp.avg");
  ASSERT_TRUE(sum.is_sparse());
  EXPECT_FALSE(sum.is_coalesced());  // as Horovod: one entry per rank's entry
  EXPECT_EQ(sum._nnz(), 2 * n);
  EXPECT_EQ(sum.sizes(), (std::vector<int64_t>{5, 3}));
  EXPECT_TRUE(sum.to_dense().equal(dense_sum)) << sum.to_dense();
  EXPECT_TRUE(::torch::allclose(avg.to_dense(), dense_sum / n)) << avg.to_dense();
  expect_invalid([&] { sparse_allreduce(sparse_input(0), "sp.max", ReduceOp::kMax); },
                 "only kSum and kAverage");
  expect_invalid([&] { sparse_allreduce(::torch::ones({2}), "sp.dense"); }, "sparse COO");
  expect_invalid([&] { allreduce(sparse_input(0), "sp.plain"); }, "sparse_allreduce");
}

TEST(HorovodParityMore, SparseAllreduceGathersIndicesAndValues) {
  for (int n : {1, 2, 3}) run_torch_workers(n, sparse_allreduce_matches_dense);
}

// ---- a sparse embedding's gradient through DistributedOptimizer

// Rank r looks up rows {r, r + 2}, then {1}: the embedding's gradient is
// sparse and covers different rows per rank.
Tensor embedding_loss(::torch::nn::Embedding& emb, int r) {
  Tensor ids = ::torch::tensor({int64_t(r), int64_t(r + 2), int64_t(1)});
  return (emb->forward(ids) * ::torch::arange(1, 4, ::torch::kFloat32)).sum() * (r + 1);
}

::torch::nn::Embedding make_embedding(bool sparse) {
  ::torch::manual_seed(11);
  return ::torch::nn::Embedding(::torch::nn::EmbeddingOptions(6, 3).sparse(sparse));
}

TEST(HorovodParityMore, SparseEmbeddingGradientStepsLikeTheDenseAverage) {
  for (int n : {2, 3}) {
    // Reference without communication: dense gradients, averaged.
    auto ref = make_embedding(false);
    Tensor avg = ::torch::zeros({6, 3});
    for (int r = 0; r < n; ++r) {
      ref->zero_grad();
      embedding_loss(ref, r).backward();
      avg += ref->weight.grad() / n;
    }
    Tensor expected = ref->weight.detach() - 0.5 * avg;
    run_torch_workers(n, [&] {
      auto emb = make_embedding(true);
      ::torch::optim::SGD sgd(emb->parameters(), 0.5);
      DistributedOptimizer dist(sgd, *emb);
      embedding_loss(emb, rank()).backward();
      ASSERT_TRUE(emb->weight.grad().is_sparse());
      dist.step();
      EXPECT_TRUE(::torch::allclose(emb->weight.detach(), expected)) << emb->weight;
    });
  }
}

// ---- init with the same static process set twice (test_process_sets_static)

// One refused Engine per process: its communicator is not reused.
void expect_static_sets_refused(std::vector<std::vector<int>> sets, const std::string& message) {
  auto results = lockstep::testing::run_workers_raw(2, [&](const comm::WorldInfo& world) {
    engine::EngineConfig config = engine::EngineConfig::from_knobs();
    config.process_sets = sets;
    expect_invalid([&] { engine::Engine e(comm::Communicator::create(world, "shm"), config); },
                   message);
  });
  lockstep::testing::expect_all_ok(results);
}

TEST(HorovodParityMore, DuplicateStaticProcessSetsAreRefusedByName) {
  expect_static_sets_refused({{0}, {0, 1}, {0}}, "sets 1 and 3 both have ranks 0;");
  // The same members in another order are the same set.
  expect_static_sets_refused({{1, 0}, {0, 1}}, "sets 1 and 2 both have ranks 0,1");
}

}  // namespace parity_more
}  // namespace lockstep::torch
