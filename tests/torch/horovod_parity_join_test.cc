// Horovod parity, issue 45 item 8 (the rest): join semantics (an allgather
// or a broadcast from a joined root refused by name, averages over the ranks
// left), remove_process_set, the out-of-place broadcast_async, and Adasum in
// DistributedOptimizer leaving every rank's parameters equal. Expected values
// are computed here without communication from what every rank holds.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <functional>

#include "lockstep/base/error.h"
#include "lockstep/torch/distributed_optimizer.h"
#include "lockstep/torch/group.h"
#include "lockstep/torch/objects.h"
#include "torch/helpers.h"

namespace lockstep::torch {
// Named, not anonymous: the target is a unity build with horovod_parity_test.cc.
namespace parity_join {

using testing::run_torch_workers;
using ::torch::Tensor;

void expect_invalid(const std::function<void()>& call, const std::vector<std::string>& parts) {
  try {
    call();
    ADD_FAILURE() << "accepted; expected InvalidArgument containing '" << parts.front() << "'";
  } catch (const InvalidArgument& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), ::testing::HasSubstr(p));
  }
}

// The input rank r holds: values in [-100, 100), different per rank.
Tensor rank_input(int r, ::torch::ScalarType dtype) {
  return (::torch::arange(17, ::torch::kInt64) * (r + 3) % 200 - 100).to(dtype);
}

// ---- join (test_horovod_join_allgather, _join_broadcast, _join_allreduce)

void after_rank0_joined() {
  const int n = size(), r = rank();
  if (r == 0) {
    EXPECT_NE(lockstep::torch::join(), 0);
    return;
  }
  // Horovod raises for both; lockstep ran the allgather with zero rows.
  expect_invalid(
      [&] {
        allgather(::torch::ones({2, 3}), "join.gather");
      },
      {"allgather 'join.gather'", "rank 0 has joined", "before join()"});
  expect_invalid([&] { broadcast(::torch::ones({3}), 0, "join.from0"); },
                 {"broadcast 'join.from0'", "its root (rank 0) has joined"});
  // A root that has not joined still broadcasts (Horovod refuses any
  // broadcast with joined ranks; docs/coming-from-horovod-ddp.md).
  Tensor b = broadcast(::torch::full({3}, static_cast<float>(r)), n - 1, "join.from_last");
  EXPECT_TRUE(b.equal(::torch::full({3}, static_cast<float>(n - 1))));
  // Averages divide by the n - 1 ranks left; integers truncate toward zero.
  for (auto dtype : {::torch::kInt32, ::torch::kInt64, ::torch::kFloat32, ::torch::kFloat64}) {
    Tensor sum = ::torch::zeros({17}, ::torch::kFloat64);
    for (int q = 1; q < n; ++q) sum += rank_input(q, ::torch::kFloat64);
    Tensor expected = ::torch::isFloatingType(dtype) ? (sum / (n - 1)).to(dtype)
                                                     : sum.div(n - 1, "trunc").to(dtype);
    Tensor got = allreduce(rank_input(r, dtype), fmt::format("join.avg.{}", c10::toString(dtype)));
    EXPECT_TRUE(::torch::allclose(got, expected)) << dtype << got << expected;
  }
  EXPECT_NE(lockstep::torch::join(), 0);
}

TEST(HorovodParityJoin, AllgatherAndJoinedRootBroadcastAreRefusedAfterJoin) {
  for (int n : {2, 3}) run_torch_workers(n, after_rank0_joined);
}

// ---- remove_process_set (hvd.remove_process_set)

void remove_a_set() {
  const int n = size(), r = rank();
  // add_process_set, not Group::create: at np 2 a Group of every rank is
  // the world (id 0), which cannot be removed.
  const int id = add_process_set({0, 1});
  const bool member = r <= 1;
  expect_invalid([] { remove_process_set(0); }, {"remove_process_set(0)", "global set"});
  Tensor x = ::torch::ones({2});
  TensorHandle pending;
  if (r == 0)  // rank 1 submits it only after the refused removal
    pending = allreduce_async(x, "ps.pending", {.op = ReduceOp::kSum, .process_set = id});
  std::vector<std::string> want = {"remove_process_set(" + std::to_string(id) + ")", "1 on rank 0",
                                   "wait for"};
  if (r == 0) want.push_back("here: 'ps.pending'");
  expect_invalid([&] { remove_process_set(id); }, want);
  if (r == 1) pending = allreduce_async(x, "ps.pending", {.op = ReduceOp::kSum, .process_set = id});
  if (member) {
    EXPECT_TRUE(pending.result().equal(::torch::full({2}, 2.0f)));
  }
  remove_process_set(id);
  if (member)
    expect_invalid([&] { allreduce(x, "ps.after", {.process_set = id}); },
                   {"process set " + std::to_string(id) + " was removed"});
  expect_invalid([&] { remove_process_set(id); }, {"already removed"});
  // The world still works, and a new set gets a new id.
  EXPECT_TRUE(allreduce(x, "ps.world", {.op = ReduceOp::kSum}).equal(::torch::full({2}, 1.0f * n)));
  const int again = add_process_set({0, 1});
  EXPECT_GT(again, id);
  if (member) {
    EXPECT_TRUE(allreduce(x, "ps.again", {.op = ReduceOp::kSum, .process_set = again})
                    .equal(::torch::full({2}, 2.0f)));
  }
}

TEST(HorovodParityJoin, RemoveProcessSet) {
  for (int n : {2, 3}) run_torch_workers(n, remove_a_set, {{"LOCKSTEP_DEADLOCK_TIMEOUT", "30"}});
}

// ---- broadcast_async out of place (hvd.broadcast_async)

void broadcast_out_of_place() {
  const int n = size(), r = rank();
  Tensor t = ::torch::full({3}, static_cast<float>(r)).requires_grad_(true);
  TensorHandle h = broadcast_async(t, n - 1, "bcast.async");
  {
    ::torch::NoGradGuard no_grad;
    t.add_(10);  // copied at the call: the broadcast does not see it
  }
  Tensor out = h.result();
  EXPECT_TRUE(out.equal(::torch::full({3}, static_cast<float>(n - 1))));
  EXPECT_FALSE(out.requires_grad());
  EXPECT_TRUE(t.detach().equal(::torch::full({3}, r + 10.0f)));  // the input is not written
  // Over a set whose root is set rank 0 (job rank 1).
  if (n == 3) {
    Group g = Group::create({1, 2});
    if (g.is_member()) {
      Tensor s = broadcast_async(::torch::full({2}, static_cast<double>(r)), 0, "bcast.set", g.id())
                     .result();
      EXPECT_TRUE(s.equal(::torch::full({2}, 1.0, ::torch::kFloat64)));
    }
  }
}

TEST(HorovodParityJoin, BroadcastAsyncReturnsANewTensor) {
  for (int n : {2, 3}) run_torch_workers(n, broadcast_out_of_place);
}

// ---- Adasum in DistributedOptimizer (test_delta_optimizer)

// Horovod's delta optimizer combines each rank's local update and adds it to
// the common start, so the ranks' parameters stay equal. lockstep combines
// the gradients and every rank steps its optimizer on the same combined
// gradient: the parameters stay equal too (bitwise), for SGD and Adam alike.
void adasum_steps_keep_parameters_equal(bool adam) {
  auto model = testing::make_mlp(7 + rank());  // different starts, then broadcast
  broadcast_parameters(*model, 0);
  std::unique_ptr<::torch::optim::Optimizer> opt;
  if (adam)
    opt = std::make_unique<::torch::optim::Adam>(model->parameters(), 0.01);
  else
    opt = std::make_unique<::torch::optim::SGD>(model->parameters(), 0.1);
  DistributedOptimizer dist(*opt, *model, {.adasum = true});
  ::torch::manual_seed(100 + rank());  // each rank its own batch
  for (int step = 0; step < 3; ++step) {
    dist.zero_grad();
    ::torch::Tensor x = ::torch::randn({4, 8}), y = ::torch::randn({4, 4});
    ::torch::mse_loss(model->forward(x), y).backward();
    dist.step();
    Tensor all =
        allgather(testing::flat_parameters(*model).unsqueeze(0), fmt::format("params.{}", step));
    for (int q = 1; q < size(); ++q)
      EXPECT_TRUE(all[q].equal(all[0])) << "rank " << q << " differs from rank 0 after step "
                                        << step << " by " << (all[q] - all[0]).abs().max();
  }
}

TEST(HorovodParityJoin, AdasumStepsLeaveEveryRanksParametersEqual) {
  for (int n : {2, 3})
    for (bool adam : {false, true})
      run_torch_workers(n, [adam] { adasum_steps_keep_parameters_equal(adam); });
}

}  // namespace parity_join
}  // namespace lockstep::torch
