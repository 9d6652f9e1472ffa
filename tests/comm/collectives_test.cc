// The collective matrix (tests/support/collective_matrix.h): every
// collective x dtype x op x world size {1,2,3,4,5 (oversubscribed on 2
// cores)} x element counts {0,1,7,1000,1M+3}, in real worker processes,
// against the scalar reference in typed_data.h. Bitwise: the shm transport
// reduces in rank order, which the reference reproduces exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/collective_matrix.h"
#include "support/multiproc.h"

namespace lockstep::testing {
namespace {

using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;

class Collectives : public ::testing::TestWithParam<int> {
 protected:
  int size() const { return GetParam(); }
  void run(const std::function<void(Communicator&)>& body) {
    expect_all_ok(run_workers(size(), [&](Communicator& c) {
      matrix::require_bitwise_reductions(true);
      body(c);
    }));
    // Rank 0 unlinks the segment once all ranks attach: nothing may remain.
    EXPECT_EQ(shm_leftovers(fmt::format("t{}x", getpid())), std::vector<std::string>{});
  }
};

TEST_P(Collectives, AllreduceEveryDtypeOpAndCount) {
  run(matrix::allreduce_every_dtype_op_and_count);
}
TEST_P(Collectives, ReduceToEveryRoot) { run(matrix::reduce_to_every_root); }
TEST_P(Collectives, BroadcastFromEveryRoot) { run(matrix::broadcast_from_every_root); }
TEST_P(Collectives, AllgatherAndAllgatherv) { run(matrix::allgather_and_allgatherv); }
TEST_P(Collectives, GatherAndScatterEveryRoot) { run(matrix::gather_and_scatter_every_root); }
TEST_P(Collectives, ReduceScatterEveryDtypeAndOp) {
  run(matrix::reduce_scatter_every_dtype_and_op);
}
TEST_P(Collectives, AlltoallAndAlltoallv) { run(matrix::alltoall_and_alltoallv); }
TEST_P(Collectives, SendRecvRingAndBarrier) { run(matrix::send_recv_ring_and_barrier); }

TEST_P(Collectives, SubsetCommunicatorFromSplit) {
  run([](Communicator& c) {
    std::vector<int> evens;
    for (int r = 0; r < c.size(); r += 2) evens.push_back(r);
    if (c.rank() % 2 == 0) {
      auto sub = c.split(evens, "evens");
      ASSERT_EQ(sub->size(), static_cast<int>(evens.size()));
      ASSERT_EQ(sub->rank(), c.rank() / 2);
      int64_t v = c.rank(), total = 0;
      sub->allreduce(&v, &total, 1, DataType::kInt64, ReduceOp::kSum);
      int64_t want = 0;
      for (int r : evens) want += r;
      EXPECT_EQ(total, want);
    }
    c.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4, 5),
                         [](const auto& info) { return fmt::format("np{}", info.param); });

}  // namespace
}  // namespace lockstep::testing
