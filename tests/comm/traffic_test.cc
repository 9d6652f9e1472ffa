// Traffic counters: each Communicator call adds this rank's payload and its
// bandwidth-optimal wire bytes (Note [Wire bytes] in src/comm/traffic.cc).
#include <gtest/gtest.h>

#include <vector>

#include "lockstep/comm/traffic.h"
#include "support/multiproc.h"

namespace lockstep::testing {
namespace {

using comm::DataType;
using comm::ReduceOp;

TEST(Traffic, WireBytesFollowTheTextbookAlgorithms) {
  EXPECT_EQ(comm::wire::allreduce(1000, 4), 1500u);  // 2(n-1)/n
  EXPECT_EQ(comm::wire::allreduce(1000, 1), 0u);
  EXPECT_EQ(comm::wire::reduce_scatter(1000, 4), 750u);
  EXPECT_EQ(comm::wire::broadcast(1000, 0, 0, 2), 1000u);  // root of a pair sends
  EXPECT_EQ(comm::wire::broadcast(1000, 1, 0, 2), 0u);     // the chain's end does not
  std::vector<size_t> blocks{10, 20, 30};
  EXPECT_EQ(comm::wire::allgatherv(blocks, 0), 40u);  // all but the successor's block
  EXPECT_EQ(comm::wire::alltoallv(blocks, 1), 40u);   // all but the block to itself
}

// Two real ranks: the counters move by exactly the calls this rank made.
TEST(Traffic, CountersMeasureEachCall) {
  expect_all_ok(run_workers(2, [](comm::Communicator& c) {
    std::vector<float> data(1000, 1.0f);
    const comm::Traffic before = comm::traffic();
    c.allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    c.broadcast(data.data(), 100, DataType::kFloat32, 0);
    const comm::Traffic d = comm::traffic() - before;
    EXPECT_EQ(d.calls, 2u);
    EXPECT_EQ(d.payload_bytes, 4000u + (c.rank() == 0 ? 400u : 0u));
    EXPECT_EQ(d.wire_bytes, 4000u + (c.rank() == 0 ? 400u : 0u));
  }));
}

}  // namespace
}  // namespace lockstep::testing
