// Dead peers and shutdown: every pending and future handle fails, naming why.
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "engine/engine_harness.h"
#include "lockstep/base/error.h"

namespace lockstep::testing {
namespace {

using engine::Handle;

TEST(EngineFailure, KilledRankFailsSurvivorsHandlesNamingIt) {
  auto results = run_engines(3, [](Engine& e) {
    std::vector<float> x(1024, 1.0f);
    e.allreduce_async("warmup", x.data(), x.data(), {1024}, DataType::kFloat32).wait();
    if (e.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ::raise(SIGKILL);
    }
    Handle h = e.allreduce_async("never", x.data(), x.data(), {1024}, DataType::kFloat32);
    // The first survivor to notice gets PeerFailure; the transport may hand
    // the others Aborted carrying the same reason. Either way: rank 2, dead.
    auto check = [](const Handle& handle) {
      try {
        handle.wait();
        ADD_FAILURE() << "expected the dead rank to fail this handle";
      } catch (const PeerFailure& f) {
        EXPECT_EQ(f.rank(), 2) << f.what();
      } catch (const Error& f) {
        EXPECT_NE(std::string(f.what()).find("rank 2"), std::string::npos) << f.what();
        EXPECT_NE(std::string(f.what()).find("died"), std::string::npos) << f.what();
      }
    };
    check(h);
    // Future operations fail the same way.
    check(e.allreduce_async("later", x.data(), x.data(), {4}, DataType::kFloat32));
  });
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].ok()) << results[0].describe();
  EXPECT_TRUE(results[1].ok()) << results[1].describe();
  EXPECT_EQ(results[2].signal, SIGKILL);
}

TEST(EngineFailure, ShutdownOnOneRankAbortsOthersPendingHandles) {
  auto results = run_engines(2, [](Engine& e) {
    std::vector<float> x(4, 1.0f);
    if (e.rank() == 0) {
      Handle h = e.allreduce_async("orphan", x.data(), x.data(), {4}, DataType::kFloat32);
      // Issue 30.6: uneven batch counts ended here with no hint of the fix.
      expect_throw_with<Aborted>([&] { h.wait(); }, {"shut down by rank 1", "uneven batch counts",
                                                     "join()", "DistributedSampler"});
    }
    // rank 1 returns at once and its harness shuts its engine down.
  });
  expect_all_ok(results);
}

}  // namespace
}  // namespace lockstep::testing
