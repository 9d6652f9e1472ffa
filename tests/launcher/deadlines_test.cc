// The supervisor's timers (src/launcher/deadlines.h), without launching
// anything: a fixed origin stands in for the clock.
#include <gtest/gtest.h>

#include <chrono>

#include "launcher/deadlines.h"

namespace lockstep::launcher {
namespace {

using std::chrono::milliseconds;
const Deadlines::TimePoint t0 = Deadlines::TimePoint{} + std::chrono::hours(1);

TEST(Deadlines, NothingArmedMeansNoWakeupAndPollBlocks) {
  Deadlines d;
  EXPECT_FALSE(d.armed(Deadline::kTerm));
  EXPECT_FALSE(d.passed(Deadline::kTerm, t0));
  EXPECT_FALSE(d.earliest({Deadline::kTerm, Deadline::kKill}).has_value());
  EXPECT_EQ(poll_timeout_ms(std::nullopt, t0), -1);
}

TEST(Deadlines, TakeDueFiresOnceAtItsTimeAndNotBefore) {
  Deadlines d;
  d.arm(Deadline::kTerm, t0 + milliseconds(100));
  EXPECT_FALSE(d.take_due(Deadline::kTerm, t0 + milliseconds(99)));
  EXPECT_TRUE(d.armed(Deadline::kTerm));
  EXPECT_TRUE(d.take_due(Deadline::kTerm, t0 + milliseconds(100)));
  EXPECT_FALSE(d.armed(Deadline::kTerm));
  EXPECT_FALSE(d.take_due(Deadline::kTerm, t0 + milliseconds(200)));
}

TEST(Deadlines, ArmOnceKeepsTheFirstTimeAndArmReplacesIt) {
  Deadlines d;
  d.arm_once(Deadline::kKill, t0 + milliseconds(50));
  d.arm_once(Deadline::kKill, t0 + milliseconds(10));
  EXPECT_EQ(d.at(Deadline::kKill), t0 + milliseconds(50));
  d.arm(Deadline::kKill, t0 + milliseconds(10));
  EXPECT_EQ(d.at(Deadline::kKill), t0 + milliseconds(10));
  d.disarm(Deadline::kKill);
  d.arm_once(Deadline::kKill, t0 + milliseconds(70));
  EXPECT_EQ(d.at(Deadline::kKill), t0 + milliseconds(70));
}

TEST(Deadlines, KindsAreIndependent) {
  Deadlines d;
  d.arm(Deadline::kStartTimeout, t0);
  EXPECT_TRUE(d.passed(Deadline::kStartTimeout, t0));
  EXPECT_FALSE(d.armed(Deadline::kStartCheck));
  EXPECT_FALSE(d.take_due(Deadline::kStartCheck, t0 + milliseconds(1)));
  EXPECT_TRUE(d.armed(Deadline::kStartTimeout));
}

TEST(Deadlines, EarliestLooksOnlyAtTheKindsAsked) {
  Deadlines d;
  d.arm(Deadline::kReform, t0 + milliseconds(5));
  d.arm(Deadline::kDrain, t0 + milliseconds(30));
  d.arm(Deadline::kKill, t0 + milliseconds(20));
  EXPECT_EQ(d.earliest({Deadline::kKill, Deadline::kTerm, Deadline::kDrain}),
            t0 + milliseconds(20));
  EXPECT_EQ(d.earliest({Deadline::kDrain, Deadline::kReform}), t0 + milliseconds(5));
  EXPECT_FALSE(d.earliest({Deadline::kTerm, Deadline::kStartCheck}).has_value());
}

TEST(Deadlines, EarlierNeverPicksAnUnsetTime) {
  auto a = t0 + milliseconds(3), b = t0 + milliseconds(4);
  EXPECT_EQ(earlier(a, b), a);
  EXPECT_EQ(earlier(b, a), a);
  EXPECT_EQ(earlier(std::nullopt, b), b);
  EXPECT_EQ(earlier(a, std::nullopt), a);
  EXPECT_FALSE(earlier(std::nullopt, std::nullopt).has_value());
}

TEST(Deadlines, PollTimeoutRoundsUpAndIsZeroOncePassed) {
  EXPECT_EQ(poll_timeout_ms(t0, t0), 0);
  EXPECT_EQ(poll_timeout_ms(t0 - milliseconds(5), t0), 0);
  EXPECT_EQ(poll_timeout_ms(t0 + milliseconds(250), t0), 251);
  EXPECT_EQ(poll_timeout_ms(t0 + std::chrono::microseconds(1300), t0), 2);
  // Under a whole millisecond left counts as due (poll returns at once).
  EXPECT_EQ(poll_timeout_ms(t0 + std::chrono::microseconds(300), t0), 0);
}

}  // namespace
}  // namespace lockstep::launcher
