// Invalid arguments fail locally, before any communication, with the op and
// the argument named; the communicator stays usable afterwards.
#include <gtest/gtest.h>

#include <cstdlib>

#include "lockstep/base/error.h"
#include "support/multiproc.h"

namespace lockstep::testing {
namespace {

using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;

void expect_invalid(const char* fragment, const std::function<void()>& call) {
  try {
    call();
    ADD_FAILURE() << "expected InvalidArgument containing '" << fragment << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Arguments, BadCallsAreRejectedBeforeCommunicating) {
  expect_all_ok(run_workers(2, [](Communicator& c) {
    float x[4] = {1, 2, 3, 4};
    expect_invalid("allreduce: send buffer is null but count is 4",
                   [&] { c.allreduce(nullptr, x, 4, DataType::kFloat32, ReduceOp::kSum); });
    expect_invalid("allreduce: unknown dtype value 99",
                   [&] { c.allreduce(x, 4, static_cast<DataType>(99), ReduceOp::kSum); });
    expect_invalid("allreduce: unknown reduce op value 17",
                   [&] { c.allreduce(x, 4, DataType::kFloat32, static_cast<ReduceOp>(17)); });
    expect_invalid("broadcast: root 2 is out of range [0, 2)",
                   [&] { c.broadcast(x, 4, DataType::kFloat32, 2); });
    expect_invalid("reduce: root -1 is out of range",
                   [&] { c.reduce(x, x, 4, DataType::kFloat32, ReduceOp::kSum, -1); });
    std::vector<size_t> three = {1, 1, 1};
    expect_invalid("allgather: recv_counts has 3 entries but the communicator has 2 ranks",
                   [&] { c.allgatherv(x, x, three, DataType::kFloat32); });
    expect_invalid("send: peer rank", [&] { c.send(x, 1, DataType::kFloat32, c.rank()); });
    expect_invalid("recv: peer rank 7 is out of range",
                   [&] { c.recv(x, 1, DataType::kFloat32, 7); });
    // Nothing was consumed: a valid collective still lines up across ranks.
    c.allreduce(x, 4, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(x[3], 8.0f);
  }));
}

TEST(Arguments, ZeroCountWithNullBuffersIsAllowed) {
  expect_all_ok(run_workers(3, [](Communicator& c) {
    c.allreduce(nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum);
    c.broadcast(nullptr, 0, DataType::kInt8, 1);
    c.allgather(nullptr, nullptr, 0, DataType::kInt64);
  }));
}

TEST(World, InconsistentEnvironmentIsRejected) {
  comm::WorldInfo w;
  w.rank = 3;
  w.size = 2;
  EXPECT_THROW(w.validate(), InvalidArgument);
  w.rank = 0;
  w.local_size = 2;
  w.job_id = "bad/id";
  EXPECT_THROW(w.validate(), InvalidArgument);
}

TEST(World, SeveralRanksWithoutJobIdAskForTheLauncher) {
  comm::WorldInfo w;
  w.size = 2;
  w.local_size = 2;
  try {
    Communicator::create(w, "shm");
    ADD_FAILURE() << "no error without a job id";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("lockstep run"), std::string::npos) << e.what();
  }
}

TEST(World, UnknownBackendNamesTheAvailableOnes) {
  try {
    Communicator::create(comm::WorldInfo{}, "carrier-pigeon");
    ADD_FAILURE() << "unknown backend accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("available"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep::testing
