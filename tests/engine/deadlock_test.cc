// Deadlocks are reported within about a second (Note [Deadlock detection]),
// slow ranks are not. The bug: ranks that waited on names the others never
// submitted got a warning every 10 s and an error only at the 300 s stall
// timeout.
#include <chrono>
#include <thread>

#include "engine/engine_harness.h"
#include "lockstep/base/error.h"

namespace lockstep::testing {
namespace {

using engine::Handle;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Waits on `h` expecting a DeadlockError that names every part; returns how
// long the wait took.
double expect_deadlock(const Handle& h, const std::vector<std::string>& parts) {
  auto start = Clock::now();
  expect_throw_with<DeadlockError>([&] { h.wait(); }, parts);
  return seconds_since(start);
}

// After a deadlock the engine still works: both ranks reduce once more.
void expect_usable(Engine& e) {
  std::vector<float> x(4, 1.0f);
  e.allreduce_async("after", x.data(), x.data(), {4}, DataType::kFloat32).wait();
  EXPECT_EQ(x[0], static_cast<float>(e.size()));
}

TEST(EngineDeadlock, DisjointNamesAreReportedWithinTwoSeconds) {
  auto results = run_engines(2, [](Engine& e) {
    std::vector<float> x(4, 1.0f);
    e.barrier();
    Handle h =
        e.allreduce_async(e.rank() == 0 ? "x" : "y", x.data(), x.data(), {4}, DataType::kFloat32);
    double waited =
        expect_deadlock(h, {"deadlock", "process set 0",
                            "rank 0 waits in allreduce 'x', which rank 1 never submitted",
                            "rank 1 waits in allreduce 'y', which rank 0 never submitted"});
    std::printf("rank %d: disjoint-names deadlock reported after %.3f s\n", e.rank(), waited);
    EXPECT_LT(waited, 2.0);
    expect_usable(e);
  });
  expect_all_ok(results);
}

TEST(EngineDeadlock, CrossedBlockingOrderIsReportedWithinTwoSeconds) {
  auto results = run_engines(2, [](Engine& e) {
    std::vector<float> a(4, 1.0f), b(4, 1.0f);
    e.barrier();
    // Rank 0 waits for 'a' before it would submit 'b'; rank 1 the other way.
    const char* first = e.rank() == 0 ? "a" : "b";
    Handle h = e.allreduce_async(first, a.data(), a.data(), {4}, DataType::kFloat32);
    double waited =
        expect_deadlock(h, {"rank 0 waits in allreduce 'a', which rank 1 never submitted",
                            "rank 1 waits in allreduce 'b', which rank 0 never submitted"});
    std::printf("rank %d: crossed-order deadlock reported after %.3f s\n", e.rank(), waited);
    EXPECT_LT(waited, 2.0);
    expect_usable(e);
  });
  expect_all_ok(results);
}

// Issue 30.4, Horovod's classic bug: a metric averaged on rank 0 only. The
// others went on to the next step's 80 gradients, and the message listed 7 of
// those and "and 73 more"; 'avg_loss' was only in the flight-recorder dump.
// Now it leads, with who waits in it and who never submitted it.
TEST(EngineDeadlock, AMetricReducedOnRankZeroOnlyIsNamedFirst) {
  auto results = run_engines(3, [](Engine& e) {
    std::vector<float> x(4 * 80, 1.0f);
    e.barrier();
    Handle h;
    if (e.rank() == 0) {
      h = e.allreduce_async("avg_loss", x.data(), x.data(), {4}, DataType::kFloat32);
    } else {
      for (int i = 0; i < 80; ++i)
        h = e.allreduce_async("grad." + std::to_string(i) + ".weight", x.data() + 4 * i,
                              x.data() + 4 * i, {4}, DataType::kFloat32);
    }
    try {
      h.wait();
      ADD_FAILURE() << "no deadlock reported";
    } catch (const DeadlockError& error) {
      std::string what = error.what();
      const size_t culprit =
          what.find("rank 0 waits in allreduce 'avg_loss', which ranks 1,2 never submitted");
      EXPECT_NE(culprit, std::string::npos) << what;
      EXPECT_LT(culprit, what.find("grad.")) << what;
      EXPECT_NE(what.find("ranks 1,2 wait in one of allreduce 'grad."), std::string::npos) << what;
      EXPECT_NE(what.find("which rank 0 never submitted"), std::string::npos) << what;
    }
  });
  expect_all_ok(results);
}

// A rank that is alive but busy (here asleep) is never blocked waiting, so
// its peers wait for it: no deadlock is reported however long it takes. The
// detection time is cut to 0.25 s so a 5 s sleep is 20 detection periods,
// the same ratio as a 20 s sleep against the 1 s default.
TEST(EngineDeadlock, SlowButAliveRankIsNotReported) {
  MultiProcOptions options;
  options.env["LOCKSTEP_DEADLOCK_TIMEOUT"] = "0.25";
  auto results = run_engines(
      2,
      [](Engine& e) {
        std::vector<float> x(4, 1.0f);
        e.barrier();
        if (e.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(5));
        e.allreduce_async("late", x.data(), x.data(), {4}, DataType::kFloat32).wait();
        EXPECT_EQ(x[0], 2.0f);
      },
      options);
  expect_all_ok(results);
}

// A rank blocked in join() counts as waiting; the others' collectives still
// run (it contributes neutral values), so this is no deadlock either.
TEST(EngineDeadlock, JoinedRankWithWorkingPeersIsNotReported) {
  MultiProcOptions options;
  options.env["LOCKSTEP_DEADLOCK_TIMEOUT"] = "0.25";
  auto results = run_engines(
      2,
      [](Engine& e) {
        std::vector<float> x(4, 1.0f);
        if (e.rank() == 1) {
          for (int i = 0; i < 3; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(400));
            e.allreduce_async("step", x.data(), x.data(), {4}, DataType::kFloat32).wait();
          }
        }
        e.join();
      },
      options);
  expect_all_ok(results);
}

}  // namespace
}  // namespace lockstep::testing
