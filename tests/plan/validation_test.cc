// plan validate's schedule (profile next to every measurement, rounds
// interleaved) and its per-round error arithmetic.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/plan/validation.h"

namespace lockstep::plan {
namespace {

// "r0 fit-shm", "r0 profile np1", ...: the schedule as text, to compare whole.
std::vector<std::string> describe(const std::vector<ScheduledRun>& runs,
                                  const std::vector<ValidationPoint>& points) {
  std::vector<std::string> out;
  for (const auto& r : runs) {
    std::string s = "r" + std::to_string(r.round) + " " + std::string(to_string(r.kind));
    if (r.point >= 0) s += " " + points[r.point].network + "@" + std::to_string(points[r.point].np);
    out.push_back(s);
  }
  return out;
}

TEST(PlanValidationSchedule, EveryMeasurementFollowsItsOwnProfileRoundAfterRound) {
  const std::vector<ValidationPoint> points = {{1, 1, "none", false, false},
                                               {2, 1, "shm", true, true}};
  const auto runs = validation_schedule(points, 2);
  EXPECT_EQ(
      describe(runs, points),
      (std::vector<std::string>{"r0 profile none@1", "r0 measure none@1", "r0 profile shm@2",
                                "r0 fit-shm shm@2", "r0 calibrate shm@2", "r0 measure shm@2",  //
                                "r1 profile none@1", "r1 measure none@1", "r1 profile shm@2",
                                "r1 fit-shm shm@2", "r1 calibrate shm@2", "r1 measure shm@2"}));
}

TEST(PlanValidationSchedule, ShapedLinksAreFittedOnceBeforeTheirFirstProfile) {
  const std::vector<ValidationPoint> points = {{2, 2, "gloo 1gbit", false, false},
                                               {2, 2, "gloo 200mbit", false, false}};
  const auto runs = validation_schedule(points, 2);
  EXPECT_EQ(describe(runs, points),
            (std::vector<std::string>{"r0 fit-netns gloo 1gbit@2", "r0 profile gloo 1gbit@2",
                                      "r0 measure gloo 1gbit@2", "r0 fit-netns gloo 200mbit@2",
                                      "r0 profile gloo 200mbit@2",
                                      "r0 measure gloo 200mbit@2",  //
                                      "r1 profile gloo 1gbit@2", "r1 measure gloo 1gbit@2",
                                      "r1 profile gloo 200mbit@2", "r1 measure gloo 200mbit@2"}));
}

TEST(PlanValidationSchedule, ZeroRoundsAreRefused) {
  EXPECT_THROW(validation_schedule({{}}, 0), InvalidArgument);
}

TEST(PlanRoundErrors, EachRoundIsComparedWithItsOwnPrediction) {
  // Round 2 ran in the slow state: measured and predicted both moved. The
  // error of the medians (120 vs 110: -8.3%) would mix rounds; the rounds'
  // own errors are -10%, 0% and +5%.
  const RoundErrors r = round_errors({100, 200, 120}, {90, 200, 126});
  ASSERT_EQ(r.error_pct.size(), 3u);
  EXPECT_DOUBLE_EQ(r.error_pct[0], -10.0);
  EXPECT_DOUBLE_EQ(r.error_pct[1], 0.0);
  EXPECT_DOUBLE_EQ(r.error_pct[2], 5.0);
  EXPECT_DOUBLE_EQ(r.median_error_pct, 0.0);
  EXPECT_DOUBLE_EQ(r.min_error_pct, -10.0);
  EXPECT_DOUBLE_EQ(r.max_error_pct, 5.0);
  EXPECT_DOUBLE_EQ(r.median_measured_ms, 120.0);
  EXPECT_DOUBLE_EQ(r.median_predicted_ms, 126.0);
  EXPECT_EQ(r.rounds_within(10), 3);
  EXPECT_EQ(r.rounds_within(5), 2);
}

TEST(PlanRoundErrors, EvenRoundsTakeTheMeanOfTheMiddleTwo) {
  const RoundErrors r = round_errors({100, 100, 100, 100}, {80, 104, 96, 130});
  EXPECT_DOUBLE_EQ(r.median_error_pct, 0.0);  // (-4 + 4) / 2
  EXPECT_DOUBLE_EQ(r.min_error_pct, -20.0);
  EXPECT_DOUBLE_EQ(r.max_error_pct, 30.0);
}

TEST(PlanRoundErrors, MismatchedOrNonPositiveRoundsAreRefused) {
  EXPECT_THROW(round_errors({100, 100}, {100}), InvalidArgument);
  EXPECT_THROW(round_errors({0}, {100}), InvalidArgument);
  EXPECT_TRUE(round_errors({}, {}).error_pct.empty());
}

TEST(PlanValidationNetns, AutoOverlapIsOffOnlyWhereTheHostsFillTheCores) {
  EXPECT_EQ(netns_overlap("auto", true), "off");
  EXPECT_EQ(netns_overlap("auto", false), "auto");
  EXPECT_EQ(netns_overlap("on", true), "on");  // asked for: measured and marked
  EXPECT_EQ(netns_overlap("off", false), "off");
}

TEST(PlanKernelHz, ReadsConfigHzOnlyFromItsOwnLine) {
  EXPECT_EQ(kernel_hz_from_config("# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n"),
            250);
  EXPECT_EQ(kernel_hz_from_config("CONFIG_HZ=1000"), 1000);
  EXPECT_EQ(kernel_hz_from_config("CONFIG_HZ_300=y\n# CONFIG_HZ=100\n"), std::nullopt);
  EXPECT_EQ(kernel_hz_from_config("CONFIG_HZ=abc\n"), std::nullopt);
  EXPECT_EQ(kernel_hz_from_config(""), std::nullopt);
}

}  // namespace
}  // namespace lockstep::plan
