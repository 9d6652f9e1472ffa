// A tiny real sweep of the main job (4 trials, a 1500-sample subset, one
// worker each, two at a time): ASHA must stop a diverging learning rate at
// its first rung, and the best trial must be one of the sane ones.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "support/scratch.h"

namespace {

namespace fs = std::filesystem;

std::string bin(const std::string& name) {
  const char* dir = std::getenv("LOCKSTEP_BIN_DIR");
  return (fs::path(dir ? dir : ".") / name).string();
}

TEST(SweepMainJob, AshaStopsADivergingLearningRateEarly) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "install dataset-fashion-mnist";
  auto dir = lockstep::testing::scratch_folder("lockstep-sweep-main", "asha");
  // In grid order 0.002, 4, 6, 0.003 (choice order): whichever of the first
  // two reaches rung 1 (epoch 1) second is judged against the other, and a
  // diverged Adam (lr 4 or 6, ~10% accuracy) is never in the top half.
  std::ofstream(dir / "space.json")
      << R"({"lr": {"type": "choice", "values": [0.002, 4, 6, 0.003]}})";
  auto cmd = fmt::format(
      "'{}' sweep --space '{}' --scheduler asha --sampler grid --budget-epochs 3 --eta 2 -np 1 --slots 2 "
      "--dir '{}' --metric test_accuracy -- '{}' --lr {{lr}} --epochs {{epochs}} "
      "--train-subset 1500 --test-subset 500 --run-dir {{dir}} > '{}' 2>&1",
      bin("lockstep"), (dir / "space.json").string(), (dir / "run").string(),
      bin("lockstep-fashion-mnist"), (dir / "out.txt").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dir / "run" / "results.json");
  auto results = nlohmann::json::parse(in);
  int stopped = 0, completed = 0;
  for (const auto& t : results["trials"]) {
    stopped += t["status"] == "stopped";
    completed += t["status"] == "completed";
    if (t["status"] == "stopped") {
      EXPECT_LT(t["epochs"].get<int>(), 3) << t;
    }
  }
  EXPECT_GE(stopped, 1) << results.dump(2);
  EXPECT_GE(completed, 1) << results.dump(2);
  const double best_lr = results["best"]["params"]["lr"].get<double>();
  EXPECT_TRUE(best_lr == 0.002 || best_lr == 0.003) << results.dump(2);
  EXPECT_GT(results["best"]["value"].get<double>(), 0.6);
  // Each trial's --run-dir is its sweep directory: the report finds its curves there.
  EXPECT_TRUE(fs::exists(dir / "run" / "trials" / "000" / "run.json"));
}

}  // namespace
