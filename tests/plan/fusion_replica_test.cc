// The engine and the planner run one fusion rule (policy::fusion_batches);
// this pins the engine's adapter (keys from dtype, op and scales; items that
// cannot fuse) to the planner's direct use on random ready lists.
#include <gtest/gtest.h>

#include <random>

#include "engine/fusion.h"
#include "lockstep/plan/simulator.h"

namespace lockstep::plan {
namespace {

using namespace lockstep::policy;  // the decisions under test

TEST(PlanFusionReplica, EngineAndPlannerBatchAlike) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 40);
    const int64_t threshold = std::vector<int64_t>{0, 1024, 64 << 10, 1 << 20}[rng() % 4];
    std::vector<engine::detail::ReadyItem> ready(n);
    std::vector<FusionItem> items(n);
    for (int i = 0; i < n; ++i) {
      auto& r = ready[i].request;
      r.name = "t" + std::to_string(i);
      r.dtype = rng() % 4 ? comm::DataType::kFloat32 : comm::DataType::kFloat16;
      r.shape = {int64_t(1 + rng() % 100000)};
      items[i] = {int64_t(r.bytes()), r.dtype == comm::DataType::kFloat32 ? 0 : 1};
    }
    auto engine = engine::detail::plan_batches(ready, size_t(threshold));
    auto replica = fusion_batches(items, threshold);
    ASSERT_EQ(engine.size(), replica.size()) << "trial " << trial;
    for (size_t b = 0; b < engine.size(); ++b) EXPECT_EQ(engine[b].items, replica[b]);
  }
}

}  // namespace
}  // namespace lockstep::plan
