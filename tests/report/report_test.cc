// `lockstep report` on checked-in fixture runs (a 2-worker main-job run with
// its timeline and per-step rows, an ASHA sweep over a choice of learning
// rates and one over batch sizes, large-batch cells, the GD lab, bench lines,
// `lockstep plan --json` for ResNet-101 on two networks, `plan validate
// --json` output with its progress lines),
// opened in headless Chromium: every chart must have drawn, the page must
// log no error, and a screenshot and per-chart PNGs must come out. Needs the
// Debian `chromium` and the npm-installed charting library (scripts/setup.sh).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace {

namespace fs = std::filesystem;

std::string bin(const std::string& name) {
  const char* dir = std::getenv("LOCKSTEP_BIN_DIR");
  return (fs::path(dir ? dir : ".") / name).string();
}

const fs::path kFixtures = LOCKSTEP_REPORT_FIXTURES;
const fs::path kArtifacts = LOCKSTEP_REPORT_ARTIFACTS;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool is_png(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  return std::string(magic + 1, 3) == "PNG" && fs::file_size(p) > 2000;
}

int report(const std::string& args, const fs::path& log) {
  const auto cmd = fmt::format("'{}' report {} > '{}' 2>&1", bin("lockstep"), args, log.string());
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// The --check line of one chart ("" when it was not drawn).
std::string chart_line(const std::string& out, const std::string& chart) {
  const auto at = out.find(fmt::format("  {} ", chart));
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

TEST(Report, EveryChartDrawsInChromiumWithoutErrors) {
  fs::remove_all(kArtifacts);
  fs::create_directories(kArtifacts);
  const auto html = kArtifacts / "report.html";
  const auto f = kFixtures;
  std::string inputs;
  for (const char* in :
       {"train", "sweep", "sweep_batch", "large_batch", "lab_gd", "bench_allreduce.jsonl",
        "plan_r101_eth25g.jsonl", "plan_r101_eth100g.jsonl", "plan_validate_netns.out"})
    inputs += fmt::format(" '{}'", (f / in).string());
  const auto log = kArtifacts / "report.log";
  ASSERT_EQ(
      report(fmt::format("{} -o '{}' --check --screenshot '{}' --png '{}'", inputs, html.string(),
                         (kArtifacts / "report.png").string(), (kArtifacts / "png").string()),
             log),
      0)
      << slurp(log);
  const std::string out = slurp(log);
  // One chart of each kind the fixtures call for, each with content.
  for (const char* chart : {"train-loss",
                            "test-accuracy",
                            "throughput",
                            "loss-per-step",
                            "lr-per-step",
                            "grad-norm-per-step",
                            "comm-wait-per-step",
                            "comm-share",
                            "top-collectives-0",
                            "sweep-lr",
                            "sweep-curves-0",
                            "sweep-batch_size",
                            "sweep-batch_size-throughput",
                            "large-batch-0",
                            "lab-gd-path-0",
                            "lab-gd-loss-time-0",
                            "bench-busbw",
                            "plan-efficiency",
                            "plan-step",
                            "validate-step",
                            "validate-error"}) {
    EXPECT_NE(out.find(fmt::format("  {} ", chart)), std::string::npos) << chart << "\n" << out;
    EXPECT_TRUE(is_png(kArtifacts / "png" / (std::string(chart) + ".png"))) << chart;
  }
  EXPECT_NE(out.find("0 empty, 0 page error(s)"), std::string::npos) << out;
  // Per-step rows: the loss per logged step, each epoch's end marked (2 epochs).
  EXPECT_NE(chart_line(out, "loss-per-step").find("2 marks"), std::string::npos) << out;
  EXPECT_NE(chart_line(out, "rank-step-time-0"), "") << "--log-ranks rows draw per-rank step times";
  // Epochs are whole numbers; a choice of batch sizes is on a log2 axis, a
  // choice of other numbers (lr 0.002, 4, 6, 0.003) is categorical.
  for (const char* chart :
       {"train-loss", "test-accuracy", "throughput", "sweep-curves-0", "sweep-curves-1"})
    EXPECT_NE(chart_line(out, chart).find(" x integer "), std::string::npos) << chart << "\n"
                                                                             << out;
  EXPECT_NE(chart_line(out, "sweep-batch_size").find(" x log2 "), std::string::npos) << out;
  EXPECT_NE(chart_line(out, "sweep-lr").find(" x category "), std::string::npos) << out;
  EXPECT_NE(chart_line(out, "loss-per-step").find(" x value "), std::string::npos) << out;
  EXPECT_TRUE(is_png(kArtifacts / "report.png"));
  // Self-contained: the library is inline and nothing is fetched.
  const std::string page = slurp(html);
  EXPECT_EQ(page.find("<script src"), std::string::npos);
  EXPECT_EQ(page.find("http://cdn"), std::string::npos);
  EXPECT_NE(page.find("Apache License"), std::string::npos) << "the library's license is kept";
  // The planner's files are recognised by their fields.
  EXPECT_NE(page.find(R"("kind":"plan")"), std::string::npos);
  EXPECT_NE(page.find(R"("kind":"plan-validate")"), std::string::npos);
  fmt::print("screenshot: {}\n", (kArtifacts / "report.png").string());
}

// The check can fail: a run without test accuracy leaves that chart empty.
TEST(Report, CheckFailsOnAnEmptyChart) {
  fs::create_directories(kArtifacts);
  const auto log = kArtifacts / "empty.log";
  EXPECT_EQ(report(fmt::format("'{}' -o '{}' --check", (kFixtures / "no_accuracy").string(),
                               (kArtifacts / "empty.html").string()),
                   log),
            1)
      << slurp(log);
  EXPECT_NE(slurp(log).find("test-accuracy"), std::string::npos);
  EXPECT_NE(slurp(log).find("EMPTY"), std::string::npos);
}

TEST(Report, NamesAnInputItCannotRead) {
  fs::create_directories(kArtifacts);
  const auto log = kArtifacts / "bad.log";
  EXPECT_EQ(
      report(fmt::format("'{}' -o '{}'", kFixtures.string(), (kArtifacts / "bad.html").string()),
             log),
      2);
  EXPECT_NE(slurp(log).find("not a run directory"), std::string::npos) << slurp(log);
}

}  // namespace
