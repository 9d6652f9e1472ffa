// The main job's time-to-accuracy recipe (--recipe fast and its pieces,
// issue 17): what it turns on, and that its averaged weights survive a
// checkpoint and resume.
#include <gtest/gtest.h>

#include "examples/example_util.h"

namespace {

using namespace lockstep::testing;

// --recipe fast and plain name the pieces they leave on; a flag given
// explicitly wins.
TEST(FashionMnistRecipe, FastTurnsOnItsPiecesUnlessAFlagSaysOtherwise) {
  if (!have_dataset()) GTEST_SKIP() << "install dataset-fashion-mnist";
  auto dir = scratch("recipe");
  const auto run = [&](const std::string& flags) {
    auto cmd = fmt::format("'{}' --train-subset 256 --test-subset 100 --max-steps 1 {} 2>'{}'",
                           main_job(), flags, (dir / "err.txt").string());
    EXPECT_EQ(exit_code(cmd), 0) << cmd;
    return read_text(dir / "err.txt");
  };
  EXPECT_NE(run("--recipe fast").find("recipe fast: pool-first, channels-last, ema 0.99"),
            std::string::npos);
  EXPECT_NE(
      run("--recipe fast --no-channels-last --ema 0.9").find("recipe fast: pool-first, ema 0.9"),
      std::string::npos);
  EXPECT_EQ(run("").find("recipe"), std::string::npos);  // the default says nothing
  // plain: the default before the recipe pieces, less whatever is asked.
  EXPECT_NE(run("--recipe plain").find("recipe plain: none"), std::string::npos);
  EXPECT_NE(run("--recipe plain --flip 0.5").find("recipe plain: flip 0.5\n"), std::string::npos);
}

// The EMA of the weights (and its update count) is saved with each
// checkpoint (averages/step-<N>.pt; in the background in async): without
// it a resumed run would restart the average from the resumed weights and
// evaluate something else than an uninterrupted run.
TEST(FashionMnistRecipe, ResumedFastRunEvaluatesLikeAnUninterruptedOne) {
  if (!have_dataset()) GTEST_SKIP() << "install dataset-fashion-mnist";
  auto dir = scratch("recipe-resume");
  const auto job = [&](const std::string& name, const std::string& flags) {
    // A constant lr, so that stopping after epoch 1 (--epochs 1) trains
    // with the same rates as the first epoch of --epochs 2. One pinned
    // intra-op thread: otherwise init() fits the thread count to the CPUs
    // idle at start, a busy CI machine gives the three runs different
    // counts, and OpenMP's reduction order moves the loss in the 7th digit.
    auto cmd = fmt::format(
        "LOCKSTEP_INTRA_OP_THREADS=1 '{}' --recipe fast --schedule constant --train-subset 2000 "
        "--test-subset 500 --checkpoint-dir '{}' --metrics '{}' {} 2>>'{}'",
        main_job(), (dir / name).string(), (dir / (name + ".jsonl")).string(), flags,
        (dir / "err.txt").string());
    ASSERT_EQ(exit_code(cmd), 0) << cmd;
  };
  job("whole", "--epochs 2");
  auto whole = read_metrics(dir / "whole.jsonl");
  ASSERT_EQ(whole.size(), 2u);
  for (const std::string format : {"file", "async"}) {
    const std::string name = "split-" + format, flags = " --checkpoint-format " + format;
    job(name, "--epochs 1" + flags);
    const int step = read_metrics(dir / (name + ".jsonl")).at(0)["step"].get<int>();
    ASSERT_TRUE(fs::exists(dir / name / "averages" / fmt::format("step-{}.pt", step))) << format;
    job(name, "--epochs 2 --resume" + flags);
    auto split = read_metrics(dir / (name + ".jsonl"));
    ASSERT_EQ(split.size(), 2u) << format;
    EXPECT_EQ(split[1]["epoch"].get<int>(), 2) << format;
    EXPECT_DOUBLE_EQ(split[1]["train_loss"].get<double>(), whole[1]["train_loss"].get<double>())
        << format;
    EXPECT_DOUBLE_EQ(split[1]["test_accuracy"].get<double>(),
                     whole[1]["test_accuracy"].get<double>())
        << format;
  }
  EXPECT_EQ(read_text(dir / "err.txt").find("no averaged weights"), std::string::npos);
}

}  // namespace
