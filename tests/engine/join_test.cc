// join(): ranks that ran out of data contribute neutral values.
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
      Handle ha = e.allreduce_async("avg", avg.data(), avg.data(), {2}, DataType::kFloat32, ReduceOp::kAverage);
      Handle hm = e.allreduce_async("min", mn.data(), mn.data(), {3}, DataType::kFloat32, ReduceOp::kMin);
      Handle hp = e.allreduce_async("prod", pr.data(), pr.data(), {1}, DataType::kFloat32, ReduceOp::kProduct);
      Handle hg = e.allgather_async("gather", row.data(), {1, 2}, DataType::kInt32, vector_allocator(gathered));
      Handle hb = e.broadcast_async("bcast", bc.data(), {1}, DataType::kFloat64, 2);
      for (Handle* h : {&hs, &ha, &hm, &hp, &hg, &hb}) h->wait();
      EXPECT_EQ(sum[3], sum_expect) << "step " << s;
      EXPECT_FLOAT_EQ(avg[1], sum_expect / static_cast<float>(active.size())) << "step " << s;
      EXPECT_EQ(mn[2], min_expect) << "step " << s;
      EXPECT_EQ(pr[0], prod_expect) << "step " << s;
      std::vector<int32_t> want;
      for (int q : active) want.insert(want.end(), {q, q});
      EXPECT_EQ(gathered, want) << "step " << s;
      EXPECT_EQ(bc[0], 2.0) << "step " << s;
    }
    if (r == 2) {
      // Ranks 0 and 1 have joined: alltoall is not defined with joined ranks.
      std::vector<float> x(3), out;
      Handle h = e.alltoall_async("a2a", x.data(), {3}, DataType::kFloat32, {}, vector_allocator(out));
      expect_throw_with<InvalidArgument>([&] { h.wait(); }, {"alltoall 'a2a'", "joined"});
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

}  // namespace
}  // namespace lockstep::testing
