// Backend's default derived collectives (src/comm/collectives/): a transport
// that implements only the six primitives must pass the matrix of every
// derived collective. The transport under test forwards just the primitives
// to a shared-memory backend, in real worker processes.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "comm/backend_factory.h"
#include "lockstep/base/error.h"
#include "support/collective_matrix.h"
#include "support/multiproc.h"

namespace lockstep::testing {
namespace {

using comm::Backend;
using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;

// What a new transport must write; everything else comes from Backend.
class PrimitivesOnly final : public Backend {
 public:
  explicit PrimitivesOnly(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return "primitives-only"; }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override {
    inner_->allreduce(send, recv, count, dtype, op);
  }
  void broadcast(void* buffer, size_t count, DataType dtype, int root) override {
    inner_->broadcast(buffer, count, dtype, root);
  }
  void allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                  DataType dtype) override {
    inner_->allgatherv(send, recv, counts, dtype);
  }
  void barrier() override { inner_->barrier(); }
  void send(const void* buffer, size_t count, DataType dtype, int peer, int tag) override {
    inner_->send(buffer, count, dtype, peer, tag);
  }
  void recv(void* buffer, size_t count, DataType dtype, int peer, int tag) override {
    inner_->recv(buffer, count, dtype, peer, tag);
  }

 private:
  std::unique_ptr<Backend> inner_;
};

class DerivedDefaults : public ::testing::TestWithParam<int> {
 protected:
  void run(void (*body)(Communicator&)) {
    expect_all_ok(run_workers_raw(GetParam(), [&](const comm::WorldInfo& world) {
      Communicator c(world,
                     std::make_unique<PrimitivesOnly>(comm::make_backend("shm", world, "w")));
      // The defaults reduce through the shm allreduce: rank order, bitwise.
      matrix::require_bitwise_reductions(true);
      // Chunking belongs to the shm primitives, tested with 1M elements in
      // collectives_test.cc; the defaults only index blocks.
      matrix::limit_counts(1000);
      body(c);
    }));
  }
};

TEST_P(DerivedDefaults, ReduceToEveryRoot) { run(matrix::reduce_to_every_root); }
TEST_P(DerivedDefaults, GatherAndScatterEveryRoot) { run(matrix::gather_and_scatter_every_root); }
TEST_P(DerivedDefaults, ReduceScatterEveryDtypeAndOp) {
  run(matrix::reduce_scatter_every_dtype_and_op);
}
TEST_P(DerivedDefaults, AlltoallAndAlltoallv) { run(matrix::alltoall_and_alltoallv); }

TEST_P(DerivedDefaults, AlltoallCountsDisagreementFailsEveryRankAndStaysUsable) {
  if (GetParam() < 2) GTEST_SKIP() << "needs two ranks";
  run([](Communicator& c) {
    int n = c.size();
    std::vector<size_t> send(n, 1), recv(n, 1);
    if (c.rank() == 0) send[1] = 2;  // rank 1 still expects 1 from rank 0
    std::vector<int32_t> in(n + 1, c.rank()), out(n, -1);
    try {
      c.alltoallv(in.data(), send, out.data(), recv, DataType::kInt32);
      ADD_FAILURE() << "alltoall counts disagreement not detected";
    } catch (const MismatchError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 sends 2 elements to rank 1"), std::string::npos)
          << e.what();
    }
    int32_t x = 1;
    c.allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(x, n);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, DerivedDefaults, ::testing::Values(2, 3),
                         [](const auto& info) { return fmt::format("np{}", info.param); });

}  // namespace
}  // namespace lockstep::testing
