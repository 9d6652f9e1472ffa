// ASHA decisions against cases worked out by hand from Note [ASHA rungs].
#include "tools/sweep/asha.h"

#include <gtest/gtest.h>

#include "lockstep/base/error.h"
#include "tools/sweep/command.h"

namespace lockstep::sweep {
namespace {

TEST(SweepAsha, RungsAreGeometricBelowTheBudget) {
  EXPECT_EQ(Asha(1, 3, 27, Mode::kMax).rungs(), (std::vector<int>{1, 3, 9}));
  EXPECT_EQ(Asha(1, 2, 4, Mode::kMax).rungs(), (std::vector<int>{1, 2}));
  EXPECT_EQ(Asha(2, 2, 9, Mode::kMax).rungs(), (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(Asha(1, 3, 1, Mode::kMax).rungs(), (std::vector<int>{}));  // budget 1: nothing to cut
  EXPECT_THROW(Asha(0, 3, 9, Mode::kMax), InvalidArgument);
  EXPECT_THROW(Asha(1, 1, 9, Mode::kMax), InvalidArgument);
  EXPECT_THROW(Asha(4, 2, 2, Mode::kMax), InvalidArgument);
}

// eta = 3, maximising. Arrivals at rung 0 (epoch 1), with n values there:
//   t0 0.50  n=1 keep 1: 0.50 is best            -> continue
//   t1 0.40  n=2 keep 1: best is 0.50            -> stop
//   t2 0.60  n=3 keep 1: 0.60 is best            -> continue
//   t3 0.55  n=4 keep 1: best is 0.60            -> stop
//   t4 0.58  n=5 keep 1: best is 0.60            -> stop
//   t5 0.59  n=6 keep 2: top two 0.60, 0.59      -> continue (ties at the cutoff continue)
//   t6 0.10  n=7 keep 2: cutoff 0.59             -> stop
TEST(SweepAsha, HandWorkedRungZeroMaximising) {
  Asha asha(1, 3, 9, Mode::kMax);
  const std::pair<double, RungDecision> cases[] = {
      {0.50, RungDecision::kContinue}, {0.40, RungDecision::kStop}, {0.60, RungDecision::kContinue},
      {0.55, RungDecision::kStop},     {0.58, RungDecision::kStop}, {0.59, RungDecision::kContinue},
      {0.10, RungDecision::kStop}};
  int trial = 0;
  for (auto [value, expected] : cases) {
    EXPECT_EQ(asha.report(trial, 1, value), expected) << "trial " << trial << " value " << value;
    ++trial;
  }
  EXPECT_EQ(asha.report(0, 2, 0.9), RungDecision::kNotARung);  // epoch 2 is no rung
  EXPECT_EQ(asha.records(0).size(), 7u);
}

// eta = 2, minimising a loss, two rungs (1 and 2 of a 4-epoch budget):
//   rung 0: t0 1.0 continue; t1 0.8 (n=2 keep 1, best) continue;
//           t2 1.2 (n=3 keep 1, best 0.8) stop; t3 0.9 (n=4 keep 2: 0.8, 0.9) continue
//   rung 1: t1 0.5 continue (first); t0 0.7 (n=2 keep 1) stop; t3 0.4 (n=3 keep 1) continue
TEST(SweepAsha, HandWorkedTwoRungsMinimising) {
  Asha asha(1, 2, 4, Mode::kMin);
  EXPECT_EQ(asha.report(0, 1, 1.0), RungDecision::kContinue);
  EXPECT_EQ(asha.report(1, 1, 0.8), RungDecision::kContinue);
  EXPECT_EQ(asha.report(2, 1, 1.2), RungDecision::kStop);
  EXPECT_EQ(asha.report(3, 1, 0.9), RungDecision::kContinue);
  EXPECT_EQ(asha.report(1, 2, 0.5), RungDecision::kContinue);
  EXPECT_EQ(asha.report(0, 2, 0.7), RungDecision::kStop);
  EXPECT_EQ(asha.report(3, 2, 0.4), RungDecision::kContinue);
}

// Restored records (a resumed sweep) count like reported ones.
TEST(SweepAsha, RestoredRecordsCompete) {
  Asha asha(1, 2, 4, Mode::kMax);
  asha.restore(0, 0, 0.9);
  EXPECT_EQ(asha.report(1, 1, 0.5), RungDecision::kStop);
  EXPECT_TRUE(Asha::promotable(0.5, {0.5, 0.9, 0.1, 0.2}, 2, Mode::kMax));  // keep 2: 0.9, 0.5
  EXPECT_FALSE(Asha::promotable(0.2, {0.5, 0.9, 0.1, 0.2}, 2, Mode::kMax));
}

TEST(SweepCommand, SubstitutesParametersAndChecksNames) {
  Substitutions v{{"lr", "0.01"}, {"metrics", "/d/m.jsonl"}};
  EXPECT_EQ(substitute("--lr={lr}", v), "--lr=0.01");
  EXPECT_EQ(substitute("{{literal}} {metrics}", v), "{literal} /d/m.jsonl");
  EXPECT_NO_THROW(check_template({"--lr", "{lr}", "--metrics={metrics}"}, {"lr", "metrics"}));
  try {
    check_template({"--lr", "{learning_rate}"}, {"lr", "metrics"});
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("{learning_rate} is neither"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(check_template({"{lr"}, {"lr"}), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::sweep
