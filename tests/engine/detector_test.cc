// Set rank 0's clocks: the deadlock detector and the stall report's growing
// interval, on hand-made cycle results.
#include <chrono>

#include <gtest/gtest.h>

#include "engine/deadlock_detector.h"
#include "engine/stall_inspector.h"

namespace lockstep::engine::detail {
namespace {

using std::chrono::milliseconds;

CycleResult deadlocked(int size) {
  CycleResult r;
  r.joined.assign(size, 0);
  r.blocked.assign(size, 1);
  r.partial.push_back({"x", Collective::kAllreduce, {0}});
  return r;
}

TEST(DeadlockDetector, ReportsOnceEveryRankWasBlockedWithoutProgressForTheTimeout) {
  DeadlockDetector d(1.0);
  auto t0 = DeadlockDetector::Clock::now();
  CycleResult r = deadlocked(3);
  EXPECT_FALSE(d.observe(r, t0));
  EXPECT_FALSE(d.observe(r, t0 + milliseconds(900)));
  EXPECT_TRUE(d.observe(r, t0 + milliseconds(1000)));
  EXPECT_NEAR(d.reported_after_s(), 1.0, 1e-9);
  r.stall_action = StallAction::kDeadlock;  // the deadlock cycle itself
  EXPECT_FALSE(d.observe(r, t0 + milliseconds(1100)));
}

TEST(DeadlockDetector, AnyBreakRestartsTheClock) {
  DeadlockDetector d(1.0);
  auto t0 = DeadlockDetector::Clock::now();
  CycleResult r = deadlocked(2);
  EXPECT_FALSE(d.observe(r, t0));
  CycleResult busy = r;
  busy.blocked[1] = 0;  // rank 1 is computing or still submitting
  EXPECT_FALSE(d.observe(busy, t0 + milliseconds(600)));
  EXPECT_FALSE(d.observe(r, t0 + milliseconds(1200)));
  CycleResult announced = r;
  announced.announced = true;
  EXPECT_FALSE(d.observe(announced, t0 + milliseconds(2000)));
  EXPECT_FALSE(d.observe(r, t0 + milliseconds(2500)));
  EXPECT_TRUE(d.observe(r, t0 + milliseconds(3500)));
}

TEST(DeadlockDetector, JoinedRanksCountAsWaitingAndNothingPendingIsNoDeadlock) {
  DeadlockDetector d(0.5);
  auto t0 = DeadlockDetector::Clock::now();
  CycleResult r = deadlocked(2);
  r.blocked[1] = 0;
  r.joined[1] = 1;
  EXPECT_FALSE(d.observe(r, t0));
  EXPECT_TRUE(d.observe(r, t0 + milliseconds(500)));
  CycleResult idle = deadlocked(2);
  idle.partial.clear();
  EXPECT_FALSE(d.observe(idle, t0 + milliseconds(600)));
  EXPECT_FALSE(d.observe(idle, t0 + milliseconds(1600)));
  DeadlockDetector off(0);
  EXPECT_FALSE(off.observe(r, t0));
  EXPECT_FALSE(off.observe(r, t0 + std::chrono::hours(1)));
}

// The bug: the engine's stall warning repeated every LOCKSTEP_STALL_WARNING
// seconds for as long as the stall lasted.
TEST(StallInspector, ReportsRepeatAtAGrowingInterval) {
  StallInspector inspector(1.0, 0);
  CycleResult r;
  r.joined = {0, 0};
  r.partial.push_back({"w", Collective::kAllreduce, {0}});
  auto t0 = StallInspector::Clock::now();
  std::vector<double> reports;
  for (int ms = 0; ms <= 16000; ms += 50) {
    auto now = t0 + milliseconds(ms);
    CycleResult cycle = r;
    if (inspector.observe(cycle, now) == StallAction::kReport) {
      reports.push_back(ms / 1000.0);
      cycle.stall_report = true;  // the next cycle carries it out
      cycle.stall_action = StallAction::kReport;
      inspector.observe(cycle, now + milliseconds(1));
    }
  }
  EXPECT_EQ(reports, (std::vector<double>{1, 3, 7, 15}));
}

}  // namespace
}  // namespace lockstep::engine::detail
