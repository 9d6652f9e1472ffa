// join(): ranks that ran out of data contribute neutral values; collectives
// that cannot run with joined ranks (allgather, alltoall, a broadcast from a
// joined root) fail by name.
#include "engine/engine_harness.h"
#include "lockstep/base/error.h"

namespace lockstep::testing {
namespace {

using engine::Handle;

TEST(EngineJoin, UnevenStepsForEveryCollective) {
  auto results = run_engines(3, [](Engine& e) {
    const int r = e.rank();
    const int steps = 2 + r;  // rank 2 runs longest and joins last
    for (int s = 0; s < steps; ++s) {
      std::vector<int> active;
      for (int q = 0; q < 3; ++q)
        if (2 + q > s) active.push_back(q);
      float sum_expect = 0, min_expect = 1e9f, prod_expect = 1;
      for (int q : active) {
        sum_expect += static_cast<float>(q + 1);
        min_expect = std::min(min_expect, static_cast<float>(q + 1));
        prod_expect *= static_cast<float>(q + 1);
      }
      std::vector<float> sum(4, r + 1.0f), avg(2, r + 1.0f), mn(3, r + 1.0f), pr(1, r + 1.0f);
      std::vector<int32_t> row = {r, r}, gathered;
      std::vector<double> bc = {static_cast<double>(r)};
      Handle hs = e.allreduce_async("sum", sum.data(), sum.data(), {4}, DataType::kFloat32);
      Handle ha = e.allreduce_async("avg", avg.data(), avg.data(), {2}, DataType::kFloat32,
                                    ReduceOp::kAverage);
      Handle hm =
          e.allreduce_async("min", mn.data(), mn.data(), {3}, DataType::kFloat32, ReduceOp::kMin);
      Handle hp = e.allreduce_async("prod", pr.data(), pr.data(), {1}, DataType::kFloat32,
                                    ReduceOp::kProduct);
      Handle hg = e.allgather_async("gather", row.data(), {1, 2}, DataType::kInt32,
                                    vector_allocator(gathered));
      Handle hb = e.broadcast_async("bcast", bc.data(), {1}, DataType::kFloat64, 2);
      for (Handle* h : {&hs, &ha, &hm, &hp, &hb}) h->wait();
      if (active.size() < 3) {
        // Horovod refuses an allgather with joined ranks; so does lockstep
        // (it used to run with zero rows from them: a short result).
        expect_throw_with<InvalidArgument>([&] { hg.wait(); },
                                           {"allgather 'gather'", "joined", "before join()"});
      } else {
        hg.wait();
      }
      EXPECT_EQ(sum[3], sum_expect) << "step " << s;
      EXPECT_FLOAT_EQ(avg[1], sum_expect / static_cast<float>(active.size())) << "step " << s;
      EXPECT_EQ(mn[2], min_expect) << "step " << s;
      EXPECT_EQ(pr[0], prod_expect) << "step " << s;
      if (active.size() == 3) {
        EXPECT_EQ(gathered, (std::vector<int32_t>{0, 0, 1, 1, 2, 2})) << "step " << s;
      }
      EXPECT_EQ(bc[0], 2.0) << "step " << s;
    }
    if (r == 2) {
      // Ranks 0 and 1 have joined: alltoall is not defined with joined ranks.
      std::vector<float> x(3), out;
      Handle h =
          e.alltoall_async("a2a", x.data(), {3}, DataType::kFloat32, {}, vector_allocator(out));
      expect_throw_with<InvalidArgument>([&] { h.wait(); }, {"alltoall 'a2a'", "joined"});
      // A broadcast whose root joined has no data to send.
      std::vector<double> b(1, 5.0);
      Handle hb = e.broadcast_async("from0", b.data(), {1}, DataType::kFloat64, 0);
      expect_throw_with<InvalidArgument>([&] { hb.wait(); },
                                         {"broadcast 'from0'", "its root (rank 0) has joined"});
      EXPECT_EQ(b[0], 5.0);  // untouched
    }
    EXPECT_EQ(e.join(), 2);
    // Everyone is back: a normal step works.
    std::vector<float> one(2, 1.0f);
    e.allreduce_async("sum", one.data(), one.data(), {2}, DataType::kFloat32).wait();
    EXPECT_EQ(one[0], 3.0f);
    // A second round where rank 0 joins last.
    if (r == 0) e.allreduce_async("solo", one.data(), one.data(), {2}, DataType::kFloat32).wait();
    EXPECT_EQ(e.join(), 0);
  });
  expect_all_ok(results);
}

// Integer averages after a join: the exact sum over the ranks that have not
// joined, divided by their count and truncated toward zero (what the
// transports do with nobody joined, and Horovod's truncating integer scale).
// They used to sum in the element type first, so an i8/u8/i16 sum that left
// the type's range wrapped around before the division.
template <typename T>
std::vector<T> join_average(Engine& e, const std::string& name, std::vector<T> mine, DataType dtype,
                            int set) {
  e.allreduce_async(name, mine.data(), mine.data(), {static_cast<int64_t>(mine.size())}, dtype,
                    ReduceOp::kAverage, 1.0, 1.0, in_set(set))
      .wait();
  return mine;
}

TEST(EngineJoin, IntegerAveragesDivideTheExactSumByTheRanksLeft) {
  auto results = run_engines(
      3,
      [](Engine& e) {
        const int r = e.rank();
        if (r == 0) {  // joins at once: ranks 1 and 2 average over 2
          EXPECT_NE(e.join(), 0);
          return;
        }
        const bool one = r == 1;
        // Set 0 (rank 0 joined) and set 1 (ranks 1 and 2, nobody joined) agree.
        for (int set : {0, 1}) {
          SCOPED_TRACE("process set " + std::to_string(set));
          auto i8 = join_average<int8_t>(e, "i8",
                                         one ? std::vector<int8_t>{100, -7, 127, -128, 3}
                                             : std::vector<int8_t>{100, 0, 127, -128, 0},
                                         DataType::kInt8, set);
          EXPECT_EQ(i8, (std::vector<int8_t>{100, -3, 127, -128, 1}));
          auto u8 = join_average<uint8_t>(e, "u8", {200, one ? uint8_t{255} : uint8_t{0}},
                                          DataType::kUInt8, set);
          EXPECT_EQ(u8, (std::vector<uint8_t>{200, 127}));
          auto i16 = join_average<int16_t>(e, "i16", {30000, one ? int16_t{-32768} : int16_t{-1}},
                                           DataType::kInt16, set);
          EXPECT_EQ(i16, (std::vector<int16_t>{30000, -16384}));
          auto i32 =
              join_average<int32_t>(e, "i32", {2000000000, one ? -7 : 0}, DataType::kInt32, set);
          EXPECT_EQ(i32, (std::vector<int32_t>{2000000000, -3}));
          auto i64 = join_average<int64_t>(e, "i64", {one ? int64_t{-9} : int64_t{2}, 5},
                                           DataType::kInt64, set);
          EXPECT_EQ(i64, (std::vector<int64_t>{-3, 5}));
        }
        EXPECT_NE(e.join(), 0);
      },
      {},
      [](EngineConfig& c) {
        c.process_sets = {{1, 2}};
      });
  expect_all_ok(results);
}

}  // namespace
}  // namespace lockstep::testing
