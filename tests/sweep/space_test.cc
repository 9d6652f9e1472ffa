#include "tools/sweep/space.h"

#include <gtest/gtest.h>

#include <set>

#include "lockstep/base/error.h"

namespace lockstep::sweep {
namespace {

const char* kIssueSpace = R"({"lr": {"type": "loguniform", "low": 0.0003, "high": 0.03},
  "batch_size": {"type": "choice", "values": [32, 64, 128]},
  "width": {"type": "int", "low": 8, "high": 64},
  "dropout": {"type": "uniform", "low": 0, "high": 0.5}})";

TEST(SweepSpace, ParsesTheDocumentedForm) {
  Space s = Space::parse_text(kIssueSpace, "t.json");
  ASSERT_EQ(s.params().size(), 4u);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    Config c = s.sample(rng);
    const double lr = c["lr"].get<double>();
    EXPECT_GE(lr, 0.0003);
    EXPECT_LE(lr, 0.03);
    EXPECT_TRUE(std::set<int>({32, 64, 128}).count(c["batch_size"].get<int>()));
    ASSERT_TRUE(c["width"].is_number_integer());
    EXPECT_GE(c["width"].get<int>(), 8);
    EXPECT_LE(c["width"].get<int>(), 64);
    EXPECT_GE(c["dropout"].get<double>(), 0.0);
    EXPECT_LE(c["dropout"].get<double>(), 0.5);
  }
}

// Log-uniform: each decade of [1e-4, 1e-1] gets about a third of the draws,
// and an int range reaches both of its ends.
TEST(SweepSpace, SamplesLogUniformlyAndCoversIntEnds) {
  Space s = Space::parse_text(R"({"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1},
                                  "k": {"type": "int", "low": 1, "high": 3}})",
                              "t");
  std::mt19937_64 rng(1);
  int decade[3] = {0, 0, 0}, ends[4] = {0, 0, 0, 0};
  const int n = 30000;
  for (int i = 0; i < n; ++i) {
    Config c = s.sample(rng);
    decade[std::min(2, static_cast<int>(std::floor(std::log10(c["lr"].get<double>()) + 4)))]++;
    ends[c["k"].get<int>()]++;
  }
  for (int d : decade) EXPECT_NEAR(d, n / 3, n / 30);
  for (int k = 1; k <= 3; ++k) EXPECT_NEAR(ends[k], n / 3, n / 30);
}

TEST(SweepSpace, GridEnumeratesEveryCombination) {
  Space s = Space::parse_text(R"({"a": {"type": "choice", "values": ["x", "y"]},
                                  "lr": {"type": "loguniform", "low": 0.001, "high": 0.1},
                                  "k": {"type": "int", "low": 1, "high": 2}})",
                              "t");
  auto grid = s.grid(3);
  ASSERT_EQ(grid.size(), 2u * 3u * 2u);
  std::set<std::string> seen;
  for (const auto& c : grid) seen.insert(c.dump());
  EXPECT_EQ(seen.size(), grid.size());
  EXPECT_NEAR(grid[0]["lr"].get<double>(), 0.001, 1e-12);
  // Parameters in name order (a, k, lr), the last varying fastest; lr is log-spaced.
  EXPECT_NEAR(grid[1]["lr"].get<double>(), 0.01, 1e-9);
  EXPECT_NEAR(grid[2]["lr"].get<double>(), 0.1, 1e-9);
  EXPECT_EQ(grid[3]["k"], 2);
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    Space::parse_text(text, "bad.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
}

TEST(SweepSpace, RejectsBadInputNamingTheProblem) {
  expect_error(R"({"lr": {"type": "loguniform", "low": 0.1})", "line 1 column");
  expect_error(R"([1, 2])", "JSON object");
  expect_error(R"({})", "no parameters");
  expect_error(R"({"lr": 0.1})", "'lr': expected an object");
  expect_error(R"({"lr": {"low": 1, "high": 2}})", "'lr': missing \"type\"");
  expect_error(R"({"lr": {"type": "gaussian", "low": 1, "high": 2}})", "unknown type 'gaussian'");
  expect_error(R"({"lr": {"type": "uniform", "low": 1}})", "'lr': missing \"high\"");
  expect_error(R"({"lr": {"type": "uniform", "low": 2, "high": 1}})",
               "low (2) must be below high (1)");
  expect_error(R"({"lr": {"type": "uniform", "low": "a", "high": 1}})",
               "\"low\" must be a finite number");
  expect_error(R"({"lr": {"type": "loguniform", "low": 0, "high": 1}})",
               "loguniform needs low > 0");
  expect_error(R"({"lr": {"type": "uniform", "low": 0, "hgih": 1, "high": 2}})",
               "unknown key 'hgih'");
  expect_error(R"({"w": {"type": "int", "low": 1.5, "high": 4}})",
               "int \"low\" must be an integer");
  expect_error(R"({"b": {"type": "choice", "values": []}})", "non-empty array");
  expect_error(R"({"b": {"type": "choice", "values": [1, 1]}})", "listed twice");
  expect_error(R"({"b": {"type": "choice", "values": [[1]]}})", "numbers, strings or booleans");
  expect_error(R"({"b": {"type": "choice"}})", "choice needs \"values\"");
  expect_error(R"({"my-lr": {"type": "uniform", "low": 0, "high": 1}})", "letters, digits and _");
  expect_error(R"({"metrics": {"type": "uniform", "low": 0, "high": 1}})", "reserved");
}

TEST(SweepSpace, FormatsValuesForCommandLines) {
  EXPECT_EQ(format_value(64), "64");
  EXPECT_EQ(format_value(0.000312345678), "0.000312346");
  EXPECT_EQ(format_value("adam"), "adam");
  EXPECT_EQ(format_value(true), "true");
}

}  // namespace
}  // namespace lockstep::sweep
