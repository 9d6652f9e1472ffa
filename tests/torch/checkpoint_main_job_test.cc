// The main job's --checkpoint-format (examples/fashion_mnist/checkpoints.h):
// a run of one epoch, then a --resume to two, in each format. Every resumed
// run trains only epoch 2 and prints the epoch-2 loss and accuracy of the
// rank-0 file's resume, bitwise: the sharded and async step directories
// hold the same state (weights, Adam moments, step, sampler, RNG). Skipped
// without the Fashion-MNIST package.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <string>

#include "examples/example_util.h"
#include "lockstep/parallel/checkpoint_dir.h"

namespace lockstep::testing {
namespace {

const char* kShort = "--train-subset 640 --test-subset 128 --batch-size 64 --log-every 0";

class MainJobCheckpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_dataset()) GTEST_SKIP() << "install dataset-fashion-mnist";
  }
  // The job's exit code; stderr appended to dir/F.err. One intra-op thread
  // in every run: a process started alone sizes its thread count to the
  // CPUs idle at init() (placement.cc), and another count splits LibTorch's
  // reductions differently, which a bitwise comparison of six processes
  // under a parallel ctest would see (it did, once, in CI).
  int run(const std::string& format, const std::string& args) const {
    return exit_code(fmt::format(
        "LOCKSTEP_INTRA_OP_THREADS=1 '{}' {} --checkpoint-dir '{}' --checkpoint-format {} "
        "--metrics '{}' {} >/dev/null 2>>'{}'",
        main_job(), kShort, (dir / ("ckpt-" + format)).string(), format,
        (dir / (format + ".jsonl")).string(), args, (dir / (format + ".err")).string()));
  }
  std::string err(const std::string& format) const { return read_text(dir / (format + ".err")); }
  fs::path dir = scratch("checkpoint-format");
};

TEST_F(MainJobCheckpoints, EveryFormatResumesToTheSameSecondEpoch) {
  std::map<std::string, nlohmann::json> second;
  for (const std::string format : {"file", "sharded", "async"}) {
    ASSERT_EQ(run(format, "--epochs 1"), 0) << err(format);
    EXPECT_NE(err(format).find("training paused"), std::string::npos) << err(format);
    ASSERT_EQ(run(format, "--epochs 2 --resume"), 0) << err(format);
    EXPECT_NE(err(format).find("resumed from"), std::string::npos) << err(format);
    auto lines = read_metrics(dir / (format + ".jsonl"));
    ASSERT_EQ(lines.size(), 2u) << format;  // the resumed run trained only epoch 2
    EXPECT_EQ(lines[1]["epoch"].get<int>(), 2) << format;
    EXPECT_EQ(lines[1]["step"].get<int>(), 2 * lines[0]["step"].get<int>()) << format;
    // --ema (on by default): the averages of each saved step, and the resume took step 1's.
    for (const auto& line : lines)
      EXPECT_TRUE(fs::exists(dir / ("ckpt-" + format) / "averages" /
                             fmt::format("step-{}.pt", line["step"].get<int>())))
          << format << " step " << line["step"];
    EXPECT_EQ(err(format).find("no averaged weights"), std::string::npos) << err(format);
    second[format] = lines[1];
  }
  EXPECT_TRUE(fs::exists(dir / "ckpt-file" / "checkpoint.pt"));
  for (const std::string format : {"sharded", "async"}) {
    const std::string newest =
        lockstep::parallel::newest_checkpoint_dir((dir / ("ckpt-" + format)).string());
    EXPECT_TRUE(fs::exists(fs::path(newest) / "model.safetensors.index.json"))
        << format << ": " << newest;
    for (const char* key : {"train_loss", "test_accuracy"})
      EXPECT_EQ(second[format][key].get<double>(), second["file"][key].get<double>())
          << format << " " << key;
  }
}

// A checkpoint whose step has no averages file (an older layout, or a kill
// between the two writes) resumes with fresh averages, said on stderr, never
// with another step's.
TEST_F(MainJobCheckpoints, ResumeWithoutTheStepsAveragesStartsThemAfresh) {
  ASSERT_EQ(run("file", "--epochs 1"), 0) << err("file");
  const int step = read_metrics(dir / "file.jsonl").at(0)["step"].get<int>();
  const fs::path averages = dir / "ckpt-file" / "averages";
  ASSERT_TRUE(fs::exists(averages / fmt::format("step-{}.pt", step))) << err("file");
  fs::rename(averages / fmt::format("step-{}.pt", step),
             averages / fmt::format("step-{}.pt", step - 1));
  ASSERT_EQ(run("file", "--epochs 2 --resume"), 0) << err("file");
  EXPECT_NE(err("file").find(fmt::format("no averaged weights saved with step {}", step)),
            std::string::npos)
      << err("file");
}

// An unknown format is a bad command line (status 2), refused while parsing.
TEST_F(MainJobCheckpoints, AnUnknownFormatIsRefusedAtStart) {
  EXPECT_EQ(run("zip", "--epochs 1"), 2);
  EXPECT_NE(err("zip").find("--checkpoint-format"), std::string::npos) << err("zip");
}

}  // namespace
}  // namespace lockstep::testing
