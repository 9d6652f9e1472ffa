// `lockstep doctor`'s diagnosis on synthetic dumps, one per shape of failure;
// tests/engine/flight_recorder_test.cc feeds it real ones.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/doctor/diagnose.h"

namespace lockstep::doctor {
namespace {

constexpr int64_t kNow = 1'000'000'000;  // µs
constexpr int64_t kSecond = 1'000'000;

Operation op(const std::string& name, int64_t seq, const std::string& state, int64_t submitted) {
  Operation o;
  o.op = "allreduce";
  o.name = name;
  o.seq = seq;
  o.state = state;
  o.submitted_us = submitted;
  o.finished_us = state == "done" ? submitted + 1000 : 0;
  return o;
}

RankDump dump(int rank, int size, std::vector<Operation> ops) {
  RankDump d;
  d.rank = rank;
  d.size = size;
  d.reason = "process set 0: stall timeout";
  d.dumped_us = kNow;
  d.operations = std::move(ops);
  return d;
}

// Two steps of "w" everywhere, as history.
std::vector<Operation> history(int64_t until) {
  return {op("w", 0, "done", until - 3 * kSecond), op("w", 1, "done", until - 2 * kSecond)};
}

TEST(Doctor, RankWithoutADumpDiedFirst) {
  auto d = diagnose({dump(0, 3, history(kNow)), dump(1, 3, history(kNow))});
  EXPECT_EQ(d.verdict, Verdict::kDied);
  EXPECT_EQ(d.culprits, std::vector<int>{2});
}

TEST(Doctor, MinorityPendingAnotherNameDiverged) {
  auto h = history(kNow);
  auto with = [&](const std::string& name) {
    auto ops = h;
    ops.push_back(op(name, -1, "submitted", kNow - kSecond));
    return ops;
  };
  auto d = diagnose({dump(0, 3, with("g")), dump(1, 3, with("g_typo")), dump(2, 3, with("g"))});
  EXPECT_EQ(d.verdict, Verdict::kDiverged) << d.summary;
  EXPECT_EQ(d.culprits, std::vector<int>{1});
  EXPECT_NE(d.summary.find("submitted allreduce 'g_typo' that the others did not"),
            std::string::npos)
      << d.summary;
  EXPECT_NE(d.summary.find("never submitted allreduce 'g'"), std::string::npos) << d.summary;
}

TEST(Doctor, RankOnlyLackingANameStalledAndTheOldestActivityWasFirst) {
  auto waiting = history(kNow);
  waiting.push_back(op("a", -1, "submitted", kNow - kSecond));
  auto d = diagnose({dump(0, 4, waiting), dump(1, 4, history(kNow - 5 * kSecond)),
                     dump(2, 4, waiting), dump(3, 4, history(kNow - 2 * kSecond))});
  EXPECT_EQ(d.verdict, Verdict::kStalled) << d.summary;
  EXPECT_EQ(d.culprits, (std::vector<int>{1, 3}));
  EXPECT_NE(d.summary.find("rank 1 stalled first"), std::string::npos) << d.summary;
}

TEST(Doctor, TwoRanksTieIsBrokenByWhichNameRanBefore) {
  auto known = history(kNow);
  known.push_back(op("w", -1, "submitted", kNow - kSecond));
  auto odd = history(kNow);
  odd.push_back(op("w_new", -1, "submitted", kNow - kSecond));
  auto d = diagnose({dump(0, 2, known), dump(1, 2, odd)});
  EXPECT_EQ(d.verdict, Verdict::kDiverged) << d.summary;
  EXPECT_EQ(d.culprits, std::vector<int>{1});
}

TEST(Doctor, TwoRanksTieWithoutHistorySaysTheyDisagree) {
  auto d = diagnose(
      {dump(0, 2, {op("x", -1, "submitted", kNow)}), dump(1, 2, {op("y", -1, "submitted", kNow)})});
  EXPECT_EQ(d.verdict, Verdict::kDiverged);
  EXPECT_TRUE(d.culprits.empty());
  EXPECT_NE(d.summary.find("ranks disagree"), std::string::npos) << d.summary;
}

TEST(Doctor, RankBehindInTheNegotiatedOrderStalled) {
  auto ahead = history(kNow);
  ahead.push_back(op("w", 2, "done", kNow - kSecond));
  auto d = diagnose({dump(0, 2, ahead), dump(1, 2, history(kNow))});
  EXPECT_EQ(d.verdict, Verdict::kStalled) << d.summary;
  EXPECT_EQ(d.culprits, std::vector<int>{1});
}

TEST(Doctor, ParseRejectsWhatIsNotADumpNamingTheFile) {
  EXPECT_THROW(parse_dump("{\"format\": \"other\"}", "x.json"), std::exception);
  try {
    parse_dump("not json", "/tmp/rank9.json");
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/tmp/rank9.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace lockstep::doctor
