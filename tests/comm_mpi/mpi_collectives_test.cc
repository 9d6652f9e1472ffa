// The collective matrix over the MPI backend. Run under mpirun by ctest
// (run_mpi.sh, N = 1..4): every rank runs every test in the same order, and
// mpirun fails if any rank fails.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/backend_factory.h"
#include "support/collective_matrix.h"
#include "support/mismatch_matrix.h"
#include "lockstep/base/error.h"
#include "lockstep/comm/communicator.h"

namespace lockstep::testing {
namespace {

using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// The world as mpirun describes it (see the report about world.cc's use of
// OMPI_COMM_WORLD_NODE_RANK; this reads only the unambiguous variables).
comm::WorldInfo mpi_world() {
  comm::WorldInfo w;
  w.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
  w.size = env_int("OMPI_COMM_WORLD_SIZE", 1);
  w.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", w.rank);
  w.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", w.size);
  const char* job = std::getenv("OMPI_MCA_ess_base_jobid");
  w.job_id = fmt::format("mpitest{}", job ? job : "0");
  return w;
}

std::unique_ptr<Communicator> world_comm() { return Communicator::create(mpi_world(), "mpi"); }

TEST(MpiCollectives, BackendIsMpi) {
  auto c = world_comm();
  EXPECT_EQ(c->backend_name(), "mpi");
  EXPECT_EQ(c->size(), env_int("OMPI_COMM_WORLD_SIZE", 1));
}

TEST(MpiCollectives, AllreduceEveryDtypeOpAndCount) {
  matrix::allreduce_every_dtype_op_and_count(*world_comm());
}
TEST(MpiCollectives, ReduceToEveryRoot) { matrix::reduce_to_every_root(*world_comm()); }
TEST(MpiCollectives, BroadcastFromEveryRoot) { matrix::broadcast_from_every_root(*world_comm()); }
TEST(MpiCollectives, AllgatherAndAllgatherv) { matrix::allgather_and_allgatherv(*world_comm()); }
TEST(MpiCollectives, GatherAndScatterEveryRoot) {
  matrix::gather_and_scatter_every_root(*world_comm());
}
TEST(MpiCollectives, ReduceScatterEveryDtypeAndOp) {
  matrix::reduce_scatter_every_dtype_and_op(*world_comm());
}
TEST(MpiCollectives, AlltoallAndAlltoallv) { matrix::alltoall_and_alltoallv(*world_comm()); }
TEST(MpiCollectives, SendRecvRingAndBarrier) { matrix::send_recv_ring_and_barrier(*world_comm()); }

TEST(MpiCollectives, SubsetCommunicatorFromParent) {
  auto c = world_comm();
  std::vector<int> evens;
  for (int r = 0; r < c->size(); r += 2) evens.push_back(r);
  if (c->rank() % 2 == 0) {
    comm::WorldInfo sub = c->world();
    sub.rank = c->rank() / 2;
    sub.size = sub.local_size = static_cast<int>(evens.size());
    sub.local_rank = sub.rank;
    sub.job_id += "-sevens";
    Communicator s(sub, comm::make_subset_backend(c->backend(), evens, sub, "w"));
    int64_t v = c->rank(), total = 0;
    s.allreduce(&v, &total, 1, DataType::kInt64, ReduceOp::kSum);
    int64_t want = 0;
    for (int r : evens) want += r;
    EXPECT_EQ(total, want);
  }
  c->barrier();
}

// Four ranks pretending to be 2 hosts x 2 ranks: shm inside, MPI across.
TEST(MpiHierarchical, FakedHostsRunTheMatrix) {
  comm::WorldInfo w = mpi_world();
  if (w.size % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  w.local_size = 2;
  w.local_rank = w.rank % 2;
  w.cross_size = w.size / 2;
  w.cross_rank = w.rank / 2;
  setenv("LOCKSTEP_HIERARCHICAL", "1", 1);
  auto c = Communicator::create(w, "mpi");
  unsetenv("LOCKSTEP_HIERARCHICAL");
  EXPECT_EQ(c->backend_name(), "hierarchical-mpi");
  matrix::allreduce_every_dtype_op_and_count(*c);
  matrix::broadcast_from_every_root(*c);
}

TEST(MpiMismatch, VerifyOpsFailsEveryRankAndTheCommunicatorStaysUsable) {
  setenv("LOCKSTEP_VERIFY_OPS", "1", 1);
  auto c = world_comm();
  unsetenv("LOCKSTEP_VERIFY_OPS");
  if (c->size() < 2) GTEST_SKIP();
  std::vector<float> data(20, 1.0f);
  size_t count = c->rank() == 0 ? 10 : 20;
  try {
    c->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    ADD_FAILURE() << "mismatched counts were not detected";
  } catch (const MismatchError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("rank 0: allreduce dtype=f32 op=sum count=10"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1: allreduce dtype=f32 op=sum count=20"), std::string::npos) << what;
  }
  float x = static_cast<float>(c->rank() + 1);
  c->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(x, c->size() * (c->size() + 1) / 2.0f);
}

// Issue 15.1 across MPI: with LOCKSTEP_VERIFY_OPS=1 every pair of different
// collectives fails on every rank and later results are right.
TEST(MpiMismatch, EveryPairOfCollectivesFailsEverywhereAndLaterResultsAreRight) {
  setenv("LOCKSTEP_VERIFY_OPS", "1", 1);
  auto c = world_comm();
  unsetenv("LOCKSTEP_VERIFY_OPS");
  if (c->size() < 2) GTEST_SKIP();
  matrix::every_kind_pair_mismatch_then_right_results(*c);
}

// A late rank under LOCKSTEP_VERIFY_OPS: the verdict is verify's, on every
// rank, and the communicator stays usable. The ranks already waiting in the
// verify exchange run the watchdog's 20 ms checks; one that fell between
// the late rank publishing its descriptor and its joining the allgather
// used to throw the watchdog's unrecoverable mismatch with the allgather
// still posted (CI's ASan stage: a heap-use-after-free when MPI delivered
// into the freed buffer). That window is short, so this test catches the
// old behaviour only sometimes; the verify wait now checks liveness only.
TEST(MpiMismatch, ALateRankStillGetsTheVerifiedMismatch) {
  setenv("LOCKSTEP_VERIFY_OPS", "1", 1);
  auto c = world_comm();
  unsetenv("LOCKSTEP_VERIFY_OPS");
  if (c->size() < 2) GTEST_SKIP();
  std::vector<float> data(8, 1.0f);
  try {
    if (c->rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      c->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    } else {
      c->broadcast(data.data(), data.size(), DataType::kFloat32, 0);
    }
    ADD_FAILURE() << "the mismatch was not detected";
  } catch (const MismatchError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("rank 0: allreduce"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1: broadcast"), std::string::npos) << what;
    EXPECT_EQ(what.find("cannot recover"), std::string::npos) << what;
  }
  float x = static_cast<float>(c->rank() + 1);
  c->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(x, c->size() * (c->size() + 1) / 2.0f);
}

TEST(MpiMismatch, SendRecvTagDisagreement) {
  auto c = world_comm();
  if (c->size() < 2) GTEST_SKIP();
  int32_t v[8] = {};
  if (c->rank() == 0) {
    c->send(v, 8, DataType::kInt32, 1, /*tag=*/5);
  } else if (c->rank() == 1) {
    try {
      c->recv(v, 4, DataType::kInt32, 0, /*tag=*/6);
      ADD_FAILURE() << "tag mismatch not detected";
    } catch (const MismatchError& e) {
      EXPECT_NE(std::string(e.what()).find("expected tag 6"), std::string::npos) << e.what();
    }
  }
  c->barrier();
}

// What an unmodified program does: the world from the environment mpirun
// sets, backend auto. Run as its own ctest (comm_mpi_from_environment_np*).
TEST(MpiEnvironment, UnchangedProgramRunsUnderMpirun) {
  auto c = Communicator::from_environment();
  EXPECT_EQ(c->size(), env_int("OMPI_COMM_WORLD_SIZE", 1));
  EXPECT_EQ(c->rank(), env_int("OMPI_COMM_WORLD_RANK", 0));
  EXPECT_EQ(c->backend_name(), c->size() > 1 ? "mpi" : "shm");
  int64_t v = c->rank(), total = 0;
  c->allreduce(&v, &total, 1, DataType::kInt64, ReduceOp::kSum);
  EXPECT_EQ(total, int64_t{c->size()} * (c->size() - 1) / 2);
}

TEST(MpiSelection, AutoUnderMpirunIsMpi) {
  EXPECT_EQ(comm::resolve_backend("auto", mpi_world()), mpi_world().size > 1 ? "mpi" : "shm");
}

}  // namespace
}  // namespace lockstep::testing
