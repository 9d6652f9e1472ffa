// The GD lab's regression against the least-squares solution computed
// another way (normal equations), and the lab binary's run directory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lab_gd/regression.h"
#include "support/scratch.h"

namespace lab = lockstep::examples::lab;
namespace fs = std::filesystem;

TEST(LabGd, FullBatchDescentReachesTheLeastSquaresSolution) {
  const auto data = lab::make_data(500, {3, 2}, 1.0, 5);
  const auto best = lab::closed_form(data);
  EXPECT_NEAR(best.w, 3, 0.2);  // the noise allows this much
  EXPECT_NEAR(best.b, 2, 0.2);
  std::vector<int64_t> order(500);
  std::iota(order.begin(), order.end(), 0);
  lab::Params p{-2, 6};
  for (int s = 0; s < 2000; ++s) p = lab::step(data, order, 0, 500, p, 0.1);
  EXPECT_NEAR(p.w, best.w, 1e-9);
  EXPECT_NEAR(p.b, best.b, 1e-9);
  EXPECT_LE(lab::loss(data, best), lab::loss(data, {3, 2}));  // least squares beats the truth
}

TEST(LabGd, WritesEveryMethodsPathForTheReport) {
  const char* dir_env = std::getenv("LOCKSTEP_BIN_DIR");
  // Removed at exit unless a test failed (it used to stay in /tmp).
  const fs::path dir = lockstep::testing::scratch_folder("lockstep-lab-gd", "run");
  const auto cmd =
      fmt::format("'{}/lockstep-lab-gd' --samples 300 --epochs 5 --run-dir '{}' > /dev/null",
                  dir_env ? dir_env : ".", dir.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dir / "lab.jsonl");
  std::map<std::string, int> steps;
  int surfaces = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "step") steps[j["method"].get<std::string>()]++;
    if (j["type"] == "surface") surfaces++;
    if (j["type"] == "result" && j["method"] == "mini-batch 32") {
      EXPECT_LT(j["loss"].get<double>(), 1.1 * j["optimum_loss"].get<double>()) << j;
    }
  }
  EXPECT_EQ(surfaces, 1);
  EXPECT_EQ(steps.size(), 3u);
  for (const auto& [method, n] : steps) EXPECT_GT(n, 5) << method;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir / "run.json"))["kind"], "lab-gd");
}
