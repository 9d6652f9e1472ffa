// Horovod's own test suite (test/parallel/test_torch.py) ported to lockstep
// (issue 45): the expected values are Horovod's, computed here without
// communication from what every rank holds (each rank's input is a function
// of its rank, so every rank can compute every other's).
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <functional>

#include "lockstep/base/error.h"
#include "torch/helpers.h"

namespace lockstep::torch {
namespace {

using testing::run_torch_workers;
using ::torch::Tensor;

// The input rank r holds: 17 values in [-100, 100), different per rank.
Tensor rank_input(int r, ::torch::ScalarType dtype, int64_t n = 17) {
  return (::torch::arange(n, ::torch::kInt64) * (r + 3) % 200 - 100).to(dtype);
}

void expect_invalid(const std::function<void()>& call, const std::string& substring) {
  try {
    call();
    ADD_FAILURE() << "accepted; expected InvalidArgument containing '" << substring << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(substring));
  }
}

// ---- item 2: int16 through every collective, integer scale factors

void int16_reductions() {
  const int n = size();
  Tensor mine = rank_input(rank(), ::torch::kInt16);
  Tensor sum = ::torch::zeros({17}, ::torch::kInt64), mn = rank_input(0, ::torch::kInt64),
         mx = mn.clone();
  for (int r = 0; r < n; ++r) {
    Tensor v = rank_input(r, ::torch::kInt64);
    sum += v;
    mn = ::torch::minimum(mn, v);
    mx = ::torch::maximum(mx, v);
  }
  auto reduce = [&](ReduceOp op, const char* name) {
    Tensor out = allreduce(mine, name, {.op = op});
    EXPECT_EQ(out.scalar_type(), ::torch::kInt16) << name;
    return out.to(::torch::kInt64);
  };
  EXPECT_TRUE(reduce(ReduceOp::kSum, "i16.sum").equal(sum));
  EXPECT_TRUE(reduce(ReduceOp::kAverage, "i16.avg").equal(sum.div(n, "trunc")));
  EXPECT_TRUE(reduce(ReduceOp::kMin, "i16.min").equal(mn));
  EXPECT_TRUE(reduce(ReduceOp::kMax, "i16.max").equal(mx));
  Tensor in_place = mine.clone();
  allreduce_(in_place, "i16.inplace", {.op = ReduceOp::kSum});
  EXPECT_TRUE(in_place.to(::torch::kInt64).equal(sum));
  std::vector<Tensor> group = {mine.clone(), mine.clone() * 2};
  grouped_allreduce_async_(group, {"i16.g0", "i16.g1"}, {.op = ReduceOp::kSum}).wait();
  EXPECT_TRUE(group[1].to(::torch::kInt64).equal(sum * 2));
}

void int16_data_movement() {
  const int n = size();
  Tensor mine = rank_input(rank(), ::torch::kInt16, 6 * n);
  std::vector<Tensor> all;
  for (int r = 0; r < n; ++r) all.push_back(rank_input(r, ::torch::kInt16, 6 * n));
  EXPECT_TRUE(allgather(mine, "i16.ag").equal(::torch::cat(all)));
  EXPECT_TRUE(broadcast(mine, n - 1, "i16.bc").equal(all[n - 1]));
  std::vector<Tensor> received;
  for (int r = 0; r < n; ++r) received.push_back(all[r].narrow(0, 6 * rank(), 6));
  EXPECT_TRUE(alltoall(mine, {}, "i16.a2a").equal(::torch::cat(received)));
  Tensor total = ::torch::zeros({6 * n}, ::torch::kInt64);
  for (const Tensor& t : all) total += t.to(::torch::kInt64);
  Tensor scattered = reduce_scatter(mine, "i16.rs", {.op = ReduceOp::kSum});
  EXPECT_EQ(scattered.scalar_type(), ::torch::kInt16);
  EXPECT_TRUE(scattered.to(::torch::kInt64).equal(total.narrow(0, 6 * rank(), 6)));
}

TEST(HorovodParity, Int16ThroughEveryCollective) {
  for (int n : {1, 2, 3})
    run_torch_workers(n, [] {
      int16_reductions();
      int16_data_movement();
    });
}

// test_horovod_allreduce_prescale / _postscale: integers scale in f64 and
// truncate (Horovod: (factor * tensor.double()).type(dtype)).
void integer_scaling(::torch::ScalarType dtype) {
  const double factor = 0.5488135039273248;  // np.random.seed(1234); np.random.uniform()
  const int n = size();
  Tensor pre =
      allreduce(rank_input(rank(), dtype), "pre", {.op = ReduceOp::kSum, .prescale = factor});
  Tensor post =
      allreduce(rank_input(rank(), dtype), "post", {.op = ReduceOp::kSum, .postscale = factor});
  Tensor want_pre = ::torch::zeros({17}, ::torch::kFloat64);
  Tensor sum = ::torch::zeros({17}, ::torch::kFloat64);
  for (int r = 0; r < n; ++r) {
    Tensor x = rank_input(r, ::torch::kFloat64);
    want_pre += (x * factor).trunc();
    sum += x;
  }
  EXPECT_TRUE(pre.equal(want_pre.to(dtype))) << c10::toString(dtype) << "\n" << pre;
  EXPECT_TRUE(post.equal((sum * factor).trunc().to(dtype))) << c10::toString(dtype) << "\n" << post;
  Tensor avg =
      allreduce(rank_input(rank(), dtype), "avg", {.op = ReduceOp::kAverage, .postscale = 3.0});
  EXPECT_TRUE(avg.equal((sum * 3.0 / n).trunc().to(dtype))) << c10::toString(dtype) << "\n" << avg;
}

TEST(HorovodParity, IntegerPrescaleAndPostscaleTruncateLikeHorovod) {
  run_torch_workers(2, [] {
    for (auto dtype : {::torch::kInt16, ::torch::kInt32, ::torch::kInt64}) integer_scaling(dtype);
  });
}

TEST(HorovodParity, BoolAndSparseTensorsAreRefusedByName) {
  run_torch_workers(2, [] {
    Tensor flags = ::torch::ones({4}, ::torch::kBool);
    expect_invalid([&] { allreduce(flags, "bool"); }, "dtype Bool is not supported");
    expect_invalid([&] { allgather(flags, "bool.ag"); }, "cast to uint8");
    Tensor sparse = ::torch::eye(3).to_sparse();
    expect_invalid([&] { allreduce(sparse, "sparse"); }, "sparse tensors are not supported");
    expect_invalid([&] { broadcast(sparse, 0, "sparse.bc"); }, "to_dense()");
    allreduce(::torch::ones({2}), "still.usable");  // nothing was submitted
  });
}

// ---- item 1: gradients through the collectives (test_horovod_*_grad)

Tensor leaf(int r, int64_t rows = 17) {
  return rank_input(r, ::torch::kFloat32, rows * 3).view({rows, 3}).requires_grad_();
}

void allreduce_grads() {
  const double n = size();
  for (auto [op, want] : {std::pair{ReduceOp::kSum, n}, {ReduceOp::kAverage, 1.0}}) {
    Tensor x = leaf(rank());
    allreduce(x, "ar", {.op = op}).backward(::torch::ones({17, 3}));
    EXPECT_TRUE(x.grad().equal(::torch::full({17, 3}, want))) << x.grad();
  }
  Tensor x = leaf(rank());
  allreduce(x, "ar.scaled", {.op = ReduceOp::kSum, .prescale = 0.5, .postscale = 3.0})
      .backward(::torch::ones({17, 3}));
  EXPECT_TRUE(x.grad().allclose(::torch::full({17, 3}, 1.5 * n))) << x.grad();
  Tensor y = leaf(rank());
  Tensor m = allreduce(y, "ar.max", {.op = ReduceOp::kMax}).sum();
  expect_invalid([&] { m.backward(); }, "backward through op max is not defined");
}

void grouped_allreduce_grads() {
  const double n = size();
  std::vector<Tensor> xs = {leaf(rank()), leaf(rank(), 5)};
  auto outs = grouped_allreduce(xs, {"g.a", "g.b"}, {.op = ReduceOp::kSum});
  (outs[0].sum() + 2 * outs[1].sum()).backward();
  EXPECT_TRUE(xs[0].grad().equal(::torch::full({17, 3}, n)));
  EXPECT_TRUE(xs[1].grad().equal(::torch::full({5, 3}, 2 * n)));
  EXPECT_TRUE(outs[1].detach().equal(allreduce(xs[1].detach(), "g.check", {.op = ReduceOp::kSum})));
}

// Horovod: rank r gathers tensor_sizes[r] rows; grad_ys is r on rank r's rows.
void allgather_grads() {
  const int sizes[] = {3, 2, 7};
  Tensor x = leaf(rank(), sizes[rank()]);
  Tensor gathered = allgather(x, "ag");
  std::vector<Tensor> grad_ys;
  for (int r = 0; r < size(); ++r) grad_ys.push_back(::torch::full({sizes[r], 3}, double(r)));
  gathered.backward(::torch::cat(grad_ys));
  EXPECT_TRUE(x.grad().equal(::torch::full({sizes[rank()], 3}, double(rank() * size()))))
      << x.grad();
}

void broadcast_grads() {
  for (int root = 0; root < size(); ++root) {
    Tensor x = leaf(rank());
    broadcast(x, root, fmt::format("bc.{}", root)).backward(::torch::ones({17, 3}));
    EXPECT_TRUE(x.grad().equal(::torch::full({17, 3}, rank() == root ? double(size()) : 0.0)))
        << "root " << root;
  }
}

// Horovod sends rank+1 rows to every rank and backpropagates ones; the
// gradient of the received values themselves must bring back each rank's own.
void alltoall_grads() {
  const int n = size();
  Tensor x = leaf(rank(), (rank() + 1) * n);
  Tensor collected = alltoall(x, std::vector<int64_t>(n, rank() + 1), "a2a");
  collected.backward(collected.detach());
  EXPECT_TRUE(x.grad().equal(x.detach())) << x.grad();
  Tensor even = leaf(rank(), 2 * n);
  alltoall(even, {}, "a2a.even").backward(::torch::ones({2 * n, 3}));
  EXPECT_TRUE(even.grad().equal(::torch::ones({2 * n, 3})));
}

void reduce_scatter_grads() {
  const int n = size();
  for (auto [op, want] : {std::pair{ReduceOp::kSum, 1.0}, {ReduceOp::kAverage, 1.0 / n}}) {
    Tensor x = leaf(rank(), 4 * n);
    Tensor part = reduce_scatter(x, "rs", {.op = op});
    part.backward(::torch::ones_like(part));
    EXPECT_TRUE(x.grad().allclose(::torch::full({4 * n, 3}, want))) << x.grad();
  }
}

TEST(HorovodParity, GradientsThroughEveryCollectiveMatchHorovodsTests) {
  for (int n : {1, 2, 3})
    run_torch_workers(n, [] {
      allreduce_grads();
      grouped_allreduce_grads();
      allgather_grads();
      broadcast_grads();
      alltoall_grads();
      reduce_scatter_grads();
    });
}

// Roots count within the set; a non-member runs nothing.
TEST(HorovodParity, GradientsOverAProcessSet) {
  run_torch_workers(3, [] {
    int set = add_process_set({0, 2});
    if (rank() == 1) return;
    Tensor x = leaf(rank(), rank() + 1);
    allgather(x, "set.ag", set).backward(::torch::ones({4, 3}));
    EXPECT_TRUE(x.grad().equal(::torch::full({rank() + 1, 3}, 2.0)));
    Tensor y = leaf(rank());
    broadcast(y, 1, "set.bc", set).backward(::torch::ones({17, 3}));
    EXPECT_TRUE(y.grad().equal(::torch::full({17, 3}, rank() == 2 ? 2.0 : 0.0)));
    Tensor z = leaf(rank(), 4);
    Tensor part = reduce_scatter(z, "set.rs", {.op = ReduceOp::kAverage, .process_set = set});
    part.backward(::torch::ones_like(part));
    EXPECT_TRUE(z.grad().equal(::torch::full({4, 3}, 0.5)));
  });
}

TEST(HorovodParity, InPlaceCollectivesRefuseALeafThatRequiresGrad) {
  run_torch_workers(2, [] {
    Tensor x = leaf(rank());
    expect_invalid([&] { allreduce_(x, "leaf"); },
                   "allreduce_: the tensor is a leaf that requires grad");
    expect_invalid([&] { broadcast_(x, 0, "leaf.bc"); }, "torch::NoGradGuard");
    std::vector<Tensor> group = {x};
    expect_invalid([&] { grouped_allreduce_async_(group, {"leaf.g"}); }, "grouped_allreduce_");
    ::torch::NoGradGuard no_grad;
    broadcast_(x, 0, "leaf.nograd");  // as broadcast_parameters does
    EXPECT_TRUE(x.equal(rank_input(0, ::torch::kFloat32, 51).view({17, 3})));
  });
}

// ---- item 3: duplicate and missing names

TEST(HorovodParity, DistributedOptimizerRefusesRepeatedAndMissingNames) {
  run_torch_workers(2, [] {
    Tensor a = ::torch::zeros({3}).requires_grad_(), b = ::torch::zeros({2, 2}).requires_grad_();
    ::torch::optim::SGD sgd({a, b}, ::torch::optim::SGDOptions(0.1));
    expect_invalid(
        [&] {
          DistributedOptimizer d(sgd, {{"w", a}, {"w", b}});
        },
        fmt::format("the parameter name 'w' is given twice on rank {}", rank()));
    expect_invalid(
        [&] {
          DistributedOptimizer d(sgd, {{"a", a}});
        },
        fmt::format("1 of the optimizer's parameters have no name on rank {}, the "
                    "first parameter 1 of group 0 (shape [2,2])",
                    rank()));
    DistributedOptimizer ok(sgd, {{"a", a}, {"b", b}});  // every parameter, once
  });
}

// test_horovod_*_duplicate_name_error: a name submitted again before its
// handle was waited on, on every rank alike.
void expect_repeat_refused(const char* what, const std::function<TensorHandle()>& submit) {
  TensorHandle first = submit();
  for (int i = 0; i < 10; ++i)
    expect_invalid(
        [&] { submit(); },
        fmt::format("a collective named 'dup.{}' is already pending on rank {}", what, rank()));
  first.wait();
  submit().wait();  // waiting released the name
}

TEST(HorovodParity, ASecondPendingCollectiveWithTheSameNameIsRefused) {
  run_torch_workers(2, [] {
    Tensor x = ::torch::ones({4, 2});
    expect_repeat_refused("ar", [&] { return allreduce_async(x, "dup.ar"); });
    expect_repeat_refused("ag", [&] { return allgather_async(x, "dup.ag"); });
    expect_repeat_refused("bc", [&] { return broadcast_async_(x, 0, "dup.bc"); });
    expect_repeat_refused("rs", [&] { return reduce_scatter_async(x, "dup.rs"); });
    expect_repeat_refused("a2a", [&] { return alltoall_async(x, {}, "dup.a2a"); });
    std::vector<Tensor> group = {x.clone(), x.clone()};
    expect_invalid(
        [&] {
          grouped_allreduce_async_(group, {"dup.g", "dup.g"});
        },
        "a collective named 'dup.g' is already pending");
    allreduce(x, "dup.after");  // the job goes on
  });
}

// Horovod's duplicate-name tests drop their first handle: a handle dropped
// before wait() leaves its tensors (the private copy the engine reads and
// writes) and its name with the operation until it finishes. Before, the
// copy was freed under the engine (heap corruption: "double free" or a
// SIGSEGV within 200 drops) and the name at once.
TEST(HorovodParity, ADroppedHandleKeepsItsTensorsAndNameUntilTheOperationEnds) {
  run_torch_workers(2, [] {
    for (int i = 0; i < 200; ++i)
      allreduce_async(::torch::ones({17, 17, 17}), fmt::format("dropped.{}", i));
    if (rank() == 0) {  // rank 1 holds back, so this cannot finish yet
      allreduce_async(::torch::ones({4}), "held");
      expect_invalid([&] { allreduce_async(::torch::ones({4}), "held"); },
                     "a collective named 'held' is already pending on rank 0");
    }
    barrier();
    Tensor in_place = ::torch::ones({8});
    allreduce_async_(in_place, "dropped.in_place", {.op = ReduceOp::kSum});
    if (rank() == 1) allreduce(::torch::ones({4}), "held");  // rank 0's dropped one completes
    barrier();
    // Finished, so the name is free again and the in-place result has landed.
    EXPECT_TRUE(allreduce(::torch::ones({4}), "held", {.op = ReduceOp::kSum})
                    .equal(::torch::full({4}, 2.0f)));
    EXPECT_TRUE(in_place.equal(::torch::full({8}, 2.0f))) << in_place;
    // Assigning over an unwaited handle drops it the same way.
    TensorHandle h = allreduce_async(::torch::ones({64}), "assigned.0");
    h = allreduce_async(::torch::ones({64}), "assigned.1");
    EXPECT_TRUE(h.result().equal(::torch::full({64}, 1.0f)));  // average
    barrier();
  });
}

// The engine's own check: a name twice in one submission used to orphan the
// first entry, which waited forever with no watchdog to name it.
TEST(HorovodParity, EngineRefusesANameTwiceInOneGroup) {
  run_torch_workers(2, [] {
    std::vector<float> a(4, 1.0f), b(4, 2.0f);
    expect_invalid(
        [&] {
          engine::global().grouped_allreduce_async(
              {"twice", "twice"}, {a.data(), b.data()}, {a.data(), b.data()}, {{4}, {4}},
              comm::DataType::kFloat32, ReduceOp::kSum, 1.0, 1.0, {});
        },
        fmt::format("a collective named 'twice' is already pending on rank {} (process set 0), "
                    "earlier in the same group",
                    rank()));
    engine::global()
        .allreduce_async("twice", a.data(), a.data(), {4}, comm::DataType::kFloat32, ReduceOp::kSum)
        .wait();
    EXPECT_EQ(a[0], 2.0f);
  });
}

// ---- item 5: objects over process sets (roots count within the set)

TEST(HorovodParity, ObjectsOverAProcessSetWhoseRootIsNotGlobalRankZero) {
  run_torch_workers(3, [] {
    int set = add_process_set({1, 2});
    if (rank() == 0) return;
    const std::string mine = fmt::format("bytes of global rank {}", rank());
    for (int root : {0, 1})  // set ranks: global 1, then global 2
      EXPECT_EQ(broadcast_bytes(mine, root, fmt::format("set.bytes.{}", root), set),
                fmt::format("bytes of global rank {}", root + 1));
    std::function<std::string(const int64_t&)> to_text = [](const int64_t& v) {
      return std::to_string(v);
    };
    std::function<int64_t(const std::string&)> from_text = [](const std::string& s) {
      return std::stoll(s);
    };
    EXPECT_EQ(broadcast_object<int64_t>(100 + rank(), 1, "set.obj", to_text, from_text, set), 102);
    EXPECT_EQ(broadcast_object(int32_t(10 * rank()), 0, "set.pod", set), 10);
    EXPECT_EQ(allgather_object(int32_t(rank()), "set.all", set), (std::vector<int32_t>{1, 2}));
    expect_invalid([&] { broadcast_bytes(mine, 2, "set.outside", set); },
                   "root 2 is out of range [0, 2) (a root is a rank within the process set");
    EXPECT_EQ(broadcast_bytes(mine, 0, "set.after", set), "bytes of global rank 1");
  });
}

}  // namespace
}  // namespace lockstep::torch
