// The shm algorithms for many ranks on one host (issue 28), in real worker
// processes, oversubscribed on small machines:
//  * the collective matrix at 8 and 16 ranks, and with each algorithm and
//    way of waiting forced at 3, 5 and 8 ranks (small chunks, so messages of
//    a few KiB run through several chunks with uneven shares);
//  * per rank and algorithm, the bytes read from and written to the segment
//    equal policy::shm_allreduce_bytes' closed forms;
//  * the algorithm the runtime ran is the one plan::algorithm_for (the
//    planner) names, both asking policy::shm_allreduce_choice.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "comm/transport/shm/shm_comm.h"
#include "lockstep/base/error.h"
#include "lockstep/comm/traffic.h"
#include "lockstep/plan/cost.h"
#include "lockstep/policy/shm_algorithm.h"
#include "support/collective_matrix.h"
#include "support/multiproc.h"

namespace lockstep::testing {
namespace {

using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;

void run_matrix(int np, const MultiProcOptions& options) {
  expect_all_ok(run_workers(
      np,
      [](Communicator& c) {
        matrix::require_bitwise_reductions(true);
        matrix::limit_counts(1000);  // counts 0, 1, 7, 1000
        matrix::allreduce_every_dtype_op_and_count(c);
        matrix::reduce_to_every_root(c);
        matrix::broadcast_from_every_root(c);
        matrix::reduce_scatter_every_dtype_and_op(c);
        matrix::send_recv_ring_and_barrier(c);
      },
      options));
  EXPECT_EQ(shm_leftovers(fmt::format("t{}x", getpid())), std::vector<std::string>{});
}

class ManyRanks : public ::testing::TestWithParam<int> {};

TEST_P(ManyRanks, MatrixWithTheDefaultDecision) { run_matrix(GetParam(), {}); }

INSTANTIATE_TEST_SUITE_P(WorldSizes, ManyRanks, ::testing::Values(8, 16),
                         [](const auto& info) { return fmt::format("np{}", info.param); });

// (ranks, LOCKSTEP_SHM_ALGORITHM, LOCKSTEP_SHM_SYNC)
using Forced = std::tuple<int, std::string, std::string>;
class ForcedAlgorithm : public ::testing::TestWithParam<Forced> {};

TEST_P(ForcedAlgorithm, Matrix) {
  auto [np, algorithm, sync] = GetParam();
  MultiProcOptions options;
  options.env["LOCKSTEP_SHM_ALGORITHM"] = algorithm;
  options.env["LOCKSTEP_SHM_SYNC"] = sync;
  options.env["LOCKSTEP_SHM_CHUNK_BYTES"] = "4096";  // 1000 doubles: 2 chunks
  run_matrix(np, options);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ForcedAlgorithm,
                         ::testing::Values(Forced{3, "one_step", "dissemination"},
                                           Forced{3, "two_step", "dissemination"},
                                           Forced{5, "one_step", "linear"},
                                           Forced{5, "two_step", "dissemination"},
                                           Forced{8, "two_step", "dissemination"},
                                           Forced{8, "legacy", "auto"}),
                         [](const auto& info) {
                           return fmt::format("np{}_{}_{}", std::get<0>(info.param),
                                              std::get<1>(info.param), std::get<2>(info.param));
                         });

// The pipeline's buffer places, for both parities and 1..9 chunks: the
// first chunk in the parity slot (the only one free before the first step),
// any three consecutive chunks in disjoint half-slots, and the next
// collective's first fill in the slot the last chunk is not in. (A race on
// these would need a peer preempted mid-copy to show in the test below.)
TEST(ShmPipeline, LayoutKeepsLiveBuffersApart) {
  constexpr size_t S = 1 << 20, half = S / 2;
  for (size_t parity : {0, 1}) {
    comm::shm::PipelineLayout layout{S, parity};
    EXPECT_EQ(layout.offset(0) / S, parity);
    for (size_t c = 0; c + 2 < 9; ++c) {
      size_t a = layout.offset(c), b = layout.offset(c + 1), d = layout.offset(c + 2);
      EXPECT_TRUE(a + half <= b || b + half <= a);
      EXPECT_TRUE(a + half <= d || d + half <= a);
      EXPECT_TRUE(b + half <= d || d + half <= b);
    }
    for (size_t chunks = 1; chunks <= 9; ++chunks) {
      uint64_t fills = parity + 1 + layout.extra_fills(chunks);  // after next_buffer()
      EXPECT_NE(fills & 1, layout.offset(chunks - 1) / S) << parity << " " << chunks;
    }
  }
}

// The pipeline rotates three chunk buffers through two slots and hands the
// parity to the next collective (Note [Pipelined two-step]): messages of 1
// to 8 chunks (every last-buffer place, after either parity), each followed
// at once by collectives that fill the slots, all checked exactly.
TEST(ShmPipeline, EveryChunkCountHandsOverCleanly) {
  for (int np : {3, 5}) {
    MultiProcOptions options;
    options.env["LOCKSTEP_SHM_ALGORITHM"] = "two_step";
    options.env["LOCKSTEP_SHM_CHUNK_BYTES"] = "4096";  // 1024 floats
    expect_all_ok(run_workers(
        np,
        [](Communicator& c) {
          const int n = c.size(), me = c.rank();
          for (size_t count : {size_t{1}, size_t{1023}, size_t{1025}, size_t{2048}, size_t{3001},
                               size_t{4096}, size_t{5000}, size_t{7777}, size_t{8192}}) {
            for (bool in_place : {false, true}) {
              std::vector<float> in(count), out(count);
              for (size_t i = 0; i < count; ++i) in[i] = float(me * 1000 + int(i % 97));
              if (in_place) {
                c.allreduce(in.data(), in.data(), count, DataType::kFloat32, ReduceOp::kSum);
                out = in;
              } else {
                c.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
              }
              for (size_t i = 0; i < count; ++i)
                ASSERT_EQ(out[i], float(1000 * n * (n - 1) / 2 + n * int(i % 97)))
                    << count << " " << i;
              int64_t small = me, total = 0;  // a one-chunk pipeline right behind
              c.allreduce(&small, &total, 1, DataType::kInt64, ReduceOp::kSum);
              ASSERT_EQ(total, n * (n - 1) / 2);
              std::vector<int32_t> b(3000, me == 1 ? 7 : 0);
              c.broadcast(b.data(), b.size(), DataType::kInt32, 1);
              ASSERT_EQ(b[2999], 7);
            }
          }
        },
        options));
  }
}

// A count mismatch caught at the pipeline's first step (against another
// pipeline, or against one_step) fails every rank together and leaves the
// buffer parity aligned: the next multi-chunk and one-step calls are exact.
// The same for two_level (2 nodes of 2, forced), whose every chunk takes
// one fill.
TEST(ShmPipeline, MismatchAtTheFirstStepLeavesTheCommunicatorUsable) {
  for (const bool two_level : {false, true}) {
    MultiProcOptions options;
    options.env["LOCKSTEP_SHM_CHUNK_BYTES"] = "4096";
    if (two_level) {
      options.env["LOCKSTEP_SHM_ALGORITHM"] = "two_level";
      options.env["LOCKSTEP_SHM_NODES"] = "2";
    }
    expect_all_ok(run_workers(
        two_level ? 4 : 3,
        [](Communicator& c) {
          const int n = c.size(), me = c.rank();
          for (size_t odd : {size_t{3000}, size_t{10}}) {  // another pipeline; one_step
            const size_t count = me == 2 ? odd : 5000;
            std::vector<float> in(count, 1.0f), out(count);
            EXPECT_THROW(
                c.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum),
                MismatchError);
            std::vector<float> big(5000, float(me)), sum(5000);
            c.allreduce(big.data(), sum.data(), big.size(), DataType::kFloat32, ReduceOp::kSum);
            EXPECT_EQ(sum.front(), float(n * (n - 1) / 2));
            EXPECT_EQ(sum.back(), float(n * (n - 1) / 2));
            float one = 1, total = 0;
            c.allreduce(&one, &total, 1, DataType::kFloat32, ReduceOp::kSum);
            EXPECT_EQ(total, float(n));
          }
        },
        options));
  }
}

// Per rank, one_step reads (n-1)B and writes B; two_step writes B and reads
// 2(n-1)/n B (a reduce's other ranks (n-1)/n B) when the count splits into n
// cache-line-aligned shares; otherwise the shares differ by a line or so and
// only the sum over ranks, 2(n-1)B, is exact.
void expect_segment_traffic(Communicator& c, const char* algorithm, size_t count, int root,
                            bool even) {
  const int n = c.size();
  std::vector<float> in(count, 1.0f), out(count);
  const comm::SegmentTraffic before = comm::segment_traffic(algorithm);
  if (root < 0)
    c.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
  else
    c.reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, root);
  const comm::SegmentTraffic d = comm::segment_traffic(algorithm) - before;
  const policy::ShmAlgorithm a = std::string(algorithm) == "one_step"
                                     ? policy::ShmAlgorithm::kOneStep
                                     : policy::ShmAlgorithm::kTwoStep;
  const bool receives = root < 0 || root == c.rank();
  const policy::SegmentBytes want =
      policy::shm_allreduce_bytes(a, n, 4.0 * double(count), receives);
  EXPECT_EQ(d.calls, 1u) << algorithm;
  EXPECT_EQ(double(d.written_bytes), want.written) << algorithm << " count " << count;
  if (receives) {
    EXPECT_EQ(out[count - 1], float(n));
  }
  if (even) {
    EXPECT_EQ(double(d.read_bytes), want.read)
        << algorithm << " count " << count << " root " << root;
    return;
  }
  int64_t read = static_cast<int64_t>(d.read_bytes), total = 0;
  c.allreduce(&read, &total, 1, DataType::kInt64, ReduceOp::kSum);
  EXPECT_NEAR(double(total), n * want.read, 0.5) << algorithm << " count " << count;
}

class SegmentTraffic : public ::testing::TestWithParam<int> {};

TEST_P(SegmentTraffic, EachAlgorithmMovesItsClosedForm) {
  for (const char* algorithm : {"one_step", "two_step"}) {
    MultiProcOptions options;
    options.env["LOCKSTEP_SHM_ALGORITHM"] = algorithm;
    options.env["LOCKSTEP_SHM_CHUNK_BYTES"] = "64KiB";
    expect_all_ok(run_workers(
        GetParam(),
        [algorithm](Communicator& c) {
          // 16 floats (one cache line) per share; then 3 chunks of 64 KiB at
          // two_step, whose shares split evenly only when n divides 1024.
          const size_t unit = 16 * static_cast<size_t>(c.size());
          for (int root : {-1, c.size() - 1})
            expect_segment_traffic(c, algorithm, unit, root, true);
          expect_segment_traffic(c, algorithm, 3 * 16384 + 5, -1, false);
          std::vector<float> x(1000, 1.0f);
          const comm::SegmentTraffic b0 = comm::segment_traffic("broadcast");
          c.broadcast(x.data(), x.size(), DataType::kFloat32, 0);
          const comm::SegmentTraffic db = comm::segment_traffic("broadcast") - b0;
          const policy::SegmentBytes want =
              policy::shm_broadcast_bytes(c.size(), c.rank() == 0, 4000);
          EXPECT_EQ(double(db.read_bytes), want.read);
          EXPECT_EQ(double(db.written_bytes), want.written);
          const comm::SegmentTraffic w0 = comm::segment_traffic("barrier");
          c.barrier();
          const comm::SegmentTraffic dw = comm::segment_traffic("barrier") - w0;
          EXPECT_EQ(dw.calls, 1u);
          EXPECT_EQ(dw.read_bytes + dw.written_bytes, 0u);
        },
        options));
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, SegmentTraffic, ::testing::Values(2, 3, 5, 8),
                         [](const auto& info) { return fmt::format("np{}", info.param); });

// The runtime's choice, seen through which algorithm's counter moved, is
// the planner's for a model fitted with the same knobs: one function. With
// node groups (LOCKSTEP_SHM_NODES, the model's shm_nodes) both name two_level.
TEST(ShmDecision, RuntimeRunsWhatThePlannerPredicts) {
  for (auto [np, nodes] : {std::pair{2, 1}, {5, 1}, {16, 1}, {4, 2}, {8, 2}}) {
    MultiProcOptions options;
    options.env["LOCKSTEP_SHM_NODES"] = std::to_string(nodes);
    expect_all_ok(run_workers(
        np,
        [nodes](Communicator& c) {
          plan::NetworkModel model;  // the defaults of the knobs
          model.shm_nodes = nodes;
          for (size_t bytes :
               {size_t{64}, size_t{1} << 10, size_t{4} << 10, size_t{16} << 10, size_t{64} << 10}) {
            std::vector<float> x(bytes / 4, 1.0f);
            const std::vector<const char*> names = {"one_step", "two_step", "two_level"};
            std::vector<uint64_t> calls;
            for (const char* a : names) calls.push_back(comm::segment_traffic(a).calls);
            c.allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
            std::string ran;  // the algorithms whose counter moved
            for (size_t i = 0; i < names.size(); ++i)
              if (comm::segment_traffic(names[i]).calls > calls[i]) ran += names[i];
            const std::string planned = plan::algorithm_for(model, "shm", c.size(), double(bytes));
            EXPECT_EQ(ran, planned) << c.size() << " ranks, " << nodes << " nodes, " << bytes;
            // What the transport names (timeline, bench): the same, with its chunk.
            const std::string named = c.backend().allreduce_algorithm(bytes, 4, false);
            EXPECT_EQ(named.substr(0, planned.size()), planned) << named;
            if (planned == "two_level") {  // a reduce runs two_step instead
              EXPECT_EQ(c.backend().allreduce_algorithm(bytes, 4, true).substr(0, 8), "two_step");
            }
          }
          if (nodes > 1) {  // the largest size is on the two_step side
            EXPECT_EQ(plan::algorithm_for(model, "shm", c.size(), 64 << 10), "two_level");
          }
        },
        options));
  }
}

// Dissemination steps among 6 ranks without rank 2: ranks 3, 4 and 0 end up
// waiting on rank 2 itself, ranks 1 and 5 on rank 3, which waits on it.
// Only the latter may time out (the others wait 30 s), and they must name
// rank 2, the one that never joined, not the partner they wait on.
TEST(ShmDecision, DisseminationTimeoutNamesTheRankThatNeverJoined) {
  MultiProcOptions options;
  options.env["LOCKSTEP_SHM_SYNC"] = "dissemination";
  expect_all_ok(run_workers_raw(
      6,
      [](const comm::WorldInfo& world) {
        setenv("LOCKSTEP_TIMEOUT", world.rank == 1 || world.rank == 5 ? "1" : "30", 1);
        auto c = Communicator::create(world, "shm");
        if (c->rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2500));
          return;
        }
        try {
          c->barrier();
          ADD_FAILURE() << "barrier without rank 2 returned";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("for rank 2,"), std::string::npos) << e.what();
        }
      },
      options));
}

// Ranks started with different algorithm knobs fail at start-up, naming
// them, instead of following different protocols.
TEST(ShmDecision, RanksWithDifferentKnobsFailAtStartUp) {
  const std::vector<std::tuple<const char*, const char*, const char*>> knobs = {
      {"LOCKSTEP_SHM_SYNC", "dissemination", "linear"}, {"LOCKSTEP_SHM_NODES", "2", "auto"}};
  for (const auto& [knob_name, odd_value, value] : knobs) {
    const std::string knob = knob_name, odd = odd_value, usual = value;
    auto results = run_workers_raw(4, [&](const comm::WorldInfo& world) {
      setenv(knob.c_str(), world.rank == 1 ? odd.c_str() : usual.c_str(), 1);
      try {
        auto c = Communicator::create(world, "shm");
        ADD_FAILURE() << "expected InvalidArgument for " << knob;
      } catch (const InvalidArgument& e) {
        // The message names the knobs as LOCKSTEP_SHM_ALGORITHM, _SYNC, ... _NODES.
        EXPECT_NE(std::string(e.what()).find("_" + knob.substr(13)), std::string::npos) << e.what();
      }
    });
    expect_all_ok(results);
  }
}

}  // namespace
}  // namespace lockstep::testing
