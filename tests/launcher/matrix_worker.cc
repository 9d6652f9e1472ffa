// The collective matrix as a program that `lockstep run` starts: every rank
// runs the same gtest cases over the communicator its environment describes,
// so the matrix checks whatever backend the job resolves to (Gloo across
// network namespaces, hierarchical shm + Gloo, ...). Rank 0 prints the
// backend's name so that tests can assert which path ran.
//
// What a job of this worker adds to the in-process matrices (tests/comm,
// tests/comm_gloo, which run every case) is the launcher and the network
// between hosts, not the ops: above 1000 elements it reduces each dtype with
// one op, rotating so that every op and dtype still take the large path
// (matrix::thin_large_counts). MATRIX_ALL_LARGE_CASES=1 runs every case.
//
//   lockstep run -H ns1:2,ns2:2 ... lockstep-test-matrix-worker [--gtest_filter=...]
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "lockstep/comm/communicator.h"
#include "support/collective_matrix.h"

namespace {

lockstep::comm::Communicator& world() {
  static std::shared_ptr<lockstep::comm::Communicator> comm = [] {
    std::shared_ptr<lockstep::comm::Communicator> c =
        lockstep::comm::Communicator::from_environment();
    if (c->rank() == 0)
      std::printf("matrix-worker: backend=%s size=%d\n", std::string(c->backend_name()).c_str(),
                  c->size());
    std::fflush(stdout);
    return c;
  }();
  return *comm;
}

namespace matrix = lockstep::testing::matrix;

// Before main (gtest_main's), so before the first test.
[[maybe_unused]] const bool kThinned = [] {
  const char* all = std::getenv("MATRIX_ALL_LARGE_CASES");
  if (!all || std::string(all) != "1") matrix::thin_large_counts();
  return true;
}();

TEST(Matrix, Allreduce) { matrix::allreduce_every_dtype_op_and_count(world()); }
TEST(Matrix, Reduce) { matrix::reduce_to_every_root(world()); }
TEST(Matrix, Broadcast) { matrix::broadcast_from_every_root(world()); }
TEST(Matrix, Allgather) { matrix::allgather_and_allgatherv(world()); }
TEST(Matrix, GatherScatter) { matrix::gather_and_scatter_every_root(world()); }
TEST(Matrix, ReduceScatter) { matrix::reduce_scatter_every_dtype_and_op(world()); }
TEST(Matrix, Alltoall) { matrix::alltoall_and_alltoallv(world()); }
TEST(Matrix, SendRecvBarrier) { matrix::send_recv_ring_and_barrier(world()); }

}  // namespace
