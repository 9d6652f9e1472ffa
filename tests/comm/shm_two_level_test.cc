// The two-level (NUMA node, host) allreduce (Note [Two-level allreduce] in
// src/comm/transport/shm/shm_two_level.cc) in real worker processes, node
// groups set with LOCKSTEP_SHM_NODES (this host has one node):
//  * results bitwise equal to the rank-order reference (the collective
//    matrix) and to flat two_step on the same inputs, at 2x2, 2x3, 3x2,
//    2x4 and 4x2, every float type, several ops, uneven and multi-chunk;
//  * per rank, bytes read, written and read across nodes equal
//    policy::shm_allreduce_bytes' closed forms, two_level's cross-node bytes
//    below flat two_step's at the same grouping;
//  * groupings that do not split the ranks run the flat algorithms (ranks
//    with different LOCKSTEP_SHM_NODES: ShmDecision.RanksWithDifferentKnobs*;
//    a mismatch at two_level's first step: ShmPipeline.MismatchAtTheFirst*).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "lockstep/comm/half.h"
#include "lockstep/comm/traffic.h"
#include "lockstep/policy/shm_algorithm.h"
#include "support/collective_matrix.h"
#include "support/multiproc.h"

namespace lockstep::testing {
namespace {

using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;

using Grouping = std::pair<int, int>;  // ranks, node groups
class TwoLevel : public ::testing::TestWithParam<Grouping> {};

MultiProcOptions two_level_options(int nodes) {
  MultiProcOptions options;
  options.env["LOCKSTEP_SHM_ALGORITHM"] = "two_level";
  options.env["LOCKSTEP_SHM_NODES"] = std::to_string(nodes);
  options.env["LOCKSTEP_SHM_CHUNK_BYTES"] = "4096";  // 1000 doubles: 2 chunks
  return options;
}

TEST_P(TwoLevel, MatrixMatchesTheRankOrderReferenceBitwise) {
  auto [np, nodes] = GetParam();
  expect_all_ok(run_workers(
      np,
      [](Communicator& c) {
        const comm::SegmentTraffic before = comm::segment_traffic("two_level");
        matrix::require_bitwise_reductions(true);
        matrix::limit_counts(1000);  // counts 0, 1, 7, 1000
        matrix::allreduce_every_dtype_op_and_count(c);
        matrix::reduce_to_every_root(c);  // two_step under a two_level policy
        // Every dtype, op and count (but maybe count 0, which may skip the transport).
        EXPECT_GE(comm::segment_traffic("two_level").calls - before.calls, 8u * 5 * 3);
      },
      two_level_options(nodes)));
}

// Inputs whose sums round differently in every order: steps of 1/37 and
// 1/101 around 1 (products stay finite), in `dtype`.
std::vector<uint8_t> input(DataType dtype, size_t count, int rank, int salt) {
  std::vector<uint8_t> out(count * comm::dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    const double v = 0.6 + double((rank * 31 + salt * 7 + int(i) * 13) % 37) / 37 +
                     double((rank + int(i)) % 101) / 101 / 64;
    const float f = float(v);
    const uint16_t h = dtype == DataType::kFloat16 ? comm::float_to_f16(f) : comm::float_to_bf16(f);
    const int32_t n = int32_t(v * 1000) - 1100;
    const int8_t b = int8_t(n);
    const void* src = dtype == DataType::kFloat64   ? static_cast<const void*>(&v)
                      : dtype == DataType::kFloat32 ? static_cast<const void*>(&f)
                      : dtype == DataType::kInt32   ? static_cast<const void*>(&n)
                      : dtype == DataType::kInt8    ? static_cast<const void*>(&b)
                                                    : static_cast<const void*>(&h);
    std::memcpy(out.data() + i * comm::dtype_size(dtype), src, comm::dtype_size(dtype));
  }
  return out;
}

// One communicator per algorithm in the same workers, the same inputs.
TEST_P(TwoLevel, BitwiseEqualToFlatTwoStep) {
  auto [np, nodes] = GetParam();
  MultiProcOptions options = two_level_options(nodes);
  options.env["LOCKSTEP_SHM_SLOT_BYTES"] = "16KiB";  // int8: 1024-element chunks (int64 prefixes)
  expect_all_ok(run_workers_raw(
      np,
      [](const comm::WorldInfo& world) {
        setenv("LOCKSTEP_SHM_ALGORITHM", "two_step", 1);
        auto flat = Communicator::create(world, "shm");
        setenv("LOCKSTEP_SHM_ALGORITHM", "two_level", 1);
        comm::WorldInfo second = world;
        second.job_id += "L";
        auto two = Communicator::create(second, "shm");
        const comm::SegmentTraffic before = comm::segment_traffic("two_level");
        int salt = 0, calls = 0;
        for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                            DataType::kBFloat16, DataType::kInt8, DataType::kInt32})
          for (ReduceOp op :
               {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kProduct, ReduceOp::kMax})
            for (size_t count : {size_t{3}, size_t{1001}, size_t{5000}, size_t{12345}}) {
              const std::vector<uint8_t> in = input(dt, count, world.rank, ++salt);
              std::vector<uint8_t> a(in.size()), b(in.size());
              flat->allreduce(in.data(), a.data(), count, dt, op);
              two->allreduce(in.data(), b.data(), count, dt, op);
              ++calls;
              ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0)
                  << comm::dtype_name(dt) << " " << comm::reduce_op_name(op) << " count " << count;
            }
        EXPECT_EQ(comm::segment_traffic("two_level").calls - before.calls, uint64_t(calls));
      },
      options));
}

// One fill per chunk hands the buffer parity over like the legacy
// two_step (Note [Two-level allreduce]): 1 to 5 chunks, each call followed
// at once by calls that fill the slots (one_step, pipelined two_step
// through a reduce, broadcast), all checked exactly.
TEST_P(TwoLevel, EveryChunkCountHandsOverCleanly) {
  auto [np, nodes] = GetParam();
  expect_all_ok(run_workers(
      np,
      [](Communicator& c) {
        const int n = c.size(), me = c.rank();
        for (size_t count : {size_t{1}, size_t{1023}, size_t{1025}, size_t{2048}, size_t{3001},
                             size_t{5000}}) {  // chunks of 1024 floats
          std::vector<float> x(count);
          for (size_t i = 0; i < count; ++i) x[i] = float(me * 1000 + int(i % 97));
          c.allreduce(x.data(), count, DataType::kFloat32, ReduceOp::kSum);
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(x[i], float(1000 * n * (n - 1) / 2 + n * int(i % 97))) << count << " " << i;
          int64_t small = me, total = 0;
          c.allreduce(&small, &total, 1, DataType::kInt64, ReduceOp::kSum);
          ASSERT_EQ(total, n * (n - 1) / 2);
          std::vector<float> r(count, 1.0f), sum(count);
          c.reduce(r.data(), sum.data(), count, DataType::kFloat32, ReduceOp::kSum, n - 1);
          if (me == n - 1) {
            ASSERT_EQ(sum[count - 1], float(n));
          }
          std::vector<int32_t> b(3000, me == 1 ? 7 : 0);
          c.broadcast(b.data(), b.size(), DataType::kInt32, 1);
          ASSERT_EQ(b[2999], 7);
        }
      },
      two_level_options(nodes)));
}

INSTANTIATE_TEST_SUITE_P(Groupings, TwoLevel,
                         ::testing::Values(Grouping{4, 2}, Grouping{6, 2}, Grouping{6, 3},
                                           Grouping{8, 2}, Grouping{8, 4}),
                         [](const auto& info) {
                           return fmt::format("{}x{}", info.param.second,
                                              info.param.first / info.param.second);
                         });

// Bytes read, written and read across nodes by one allreduce of `count`
// floats, against the closed form for this rank's node: exactly when the
// shares split evenly, else summed over ranks (shares differ by a line).
// Returns this rank's cross-node bytes.
uint64_t expect_traffic(Communicator& c, policy::ShmAlgorithm algorithm, int nodes, size_t count,
                        bool even) {
  const char* name = policy::algorithm_name(algorithm);
  std::vector<float> in(count, 1.0f), out(count);
  const comm::SegmentTraffic before = comm::segment_traffic(name);
  c.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
  const comm::SegmentTraffic d = comm::segment_traffic(name) - before;
  EXPECT_EQ(d.calls, 1u) << name;
  EXPECT_EQ(out[count - 1], float(c.size()));
  const int n = c.size(), node = c.rank() / (n / nodes);
  const policy::SegmentBytes want =
      policy::shm_allreduce_bytes(algorithm, n, 4.0 * double(count), true, nodes, node);
  const std::string what = fmt::format("{} count {} rank {}", name, count, c.rank());
  if (even) {
    EXPECT_EQ(double(d.read_bytes), want.read) << what;
    EXPECT_EQ(double(d.written_bytes), want.written) << what;
    EXPECT_EQ(double(d.cross_node_read_bytes), want.cross_node_read) << what;
    return d.cross_node_read_bytes;
  }
  // Sums over ranks of what each rank moved and of what its closed form says.
  int64_t mine[6] = {
      int64_t(d.read_bytes), int64_t(d.written_bytes), int64_t(d.cross_node_read_bytes),
      int64_t(want.read),    int64_t(want.written),    int64_t(want.cross_node_read)};
  int64_t sum[6] = {};
  c.allreduce(mine, sum, 6, DataType::kInt64, ReduceOp::kSum);
  for (int k = 0; k < 3; ++k)
    EXPECT_NEAR(double(sum[k]), double(sum[k + 3]), n) << what << " " << k;
  return d.cross_node_read_bytes;
}

class TwoLevelTraffic : public ::testing::TestWithParam<Grouping> {};

TEST_P(TwoLevelTraffic, ClosedFormsAndLessAcrossNodesThanFlat) {
  auto [np, nodes] = GetParam();
  std::vector<uint64_t> cross[2];
  for (policy::ShmAlgorithm a : {policy::ShmAlgorithm::kTwoStep, policy::ShmAlgorithm::kTwoLevel}) {
    MultiProcOptions options = two_level_options(nodes);
    options.env["LOCKSTEP_SHM_ALGORITHM"] = policy::algorithm_name(a);
    options.env["LOCKSTEP_SHM_CHUNK_BYTES"] = "64KiB";
    expect_all_ok(run_workers(
        np,
        [a, nodes](Communicator& c) {
          // One cache line per share under either split; then 3 chunks whose
          // shares split evenly only for some rank counts.
          const uint64_t cross = expect_traffic(c, a, nodes, 16 * size_t(c.size()), true);
          expect_traffic(c, a, nodes, 3 * 16384 + 5, false);
          // This rank's cross-node bytes against flat two_step's closed form at
          // the same grouping (which the two_step pass checks its counters by).
          const int n = c.size(), L = n / nodes;
          const double flat = policy::shm_allreduce_bytes(policy::ShmAlgorithm::kTwoStep, n,
                                                          64.0 * n, true, nodes, c.rank() / L)
                                  .cross_node_read;
          EXPECT_EQ(flat, 2.0 * 64 * (n - L));  // 2B(n-L)/n of B = 64n bytes
          if (a == policy::ShmAlgorithm::kTwoLevel) {
            EXPECT_LT(double(cross), flat) << "rank " << c.rank();
            EXPECT_GT(cross, 0u);
          }
        },
        options));
  }
}

INSTANTIATE_TEST_SUITE_P(Groupings, TwoLevelTraffic,
                         ::testing::Values(Grouping{4, 2}, Grouping{6, 2}, Grouping{6, 3},
                                           Grouping{8, 2}),
                         [](const auto& info) {
                           return fmt::format("{}x{}", info.param.second,
                                              info.param.first / info.param.second);
                         });

// Groupings that do not split the ranks into equal groups of at least two
// run the flat algorithm, as the decision says.
TEST(TwoLevelFallback, UnequalOrSingleRankGroupsRunFlat) {
  for (Grouping g : {Grouping{8, 3}, Grouping{4, 4}, Grouping{5, 2}}) {
    expect_all_ok(run_workers(
        g.first,
        [](Communicator& c) {
          std::vector<float> x(40000, 1.0f);
          const comm::SegmentTraffic flat = comm::segment_traffic("two_step");
          const comm::SegmentTraffic two = comm::segment_traffic("two_level");
          c.allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
          EXPECT_EQ(comm::segment_traffic("two_step").calls - flat.calls, 1u);
          EXPECT_EQ(comm::segment_traffic("two_level").calls - two.calls, 0u);
          EXPECT_EQ(x.back(), float(c.size()));
        },
        two_level_options(g.second)));
  }
}

}  // namespace
}  // namespace lockstep::testing
