// Issue 40: the main job with --same-bits prints the same `state hash` at
// -np 1, 2 and 4 (the full state: parameters, BatchNorm statistics, Adam
// state), also across a --resume at another -np; without it the hash moves
// with -np (so the comparison can fail); flags that cannot give the same bits
// are refused by name.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <regex>

#include "examples/example_util.h"

namespace {

using namespace lockstep::testing;

// 1280 samples: 10 steps of 128 per epoch; 20 steps cross an epoch end.
const char* kSmall = "--train-subset 1280 --test-subset 500";

// Runs the main job under `lockstep run -np N` and returns the hash it
// printed (empty, with a failure, when the run failed or printed none).
std::string state_hash(const fs::path& dir, int np, const std::string& flags) {
  static int counter = 0;
  const auto out = dir / fmt::format("out.{}", counter), err = dir / fmt::format("err.{}", counter);
  ++counter;
  const auto cmd = fmt::format("'{}' run -np {} '{}' {} {} >'{}' 2>'{}'", bin("lockstep"), np,
                               main_job(), kSmall, flags, out.string(), err.string());
  EXPECT_EQ(exit_code(cmd), 0) << cmd << "\n" << read_text(err);
  std::smatch match;
  const std::string text = read_text(out);
  static const std::regex line("state hash: ([0-9a-f]{16})\n");
  if (!std::regex_search(text, match, line)) {
    ADD_FAILURE() << "no state hash from -np " << np << " " << flags << ":\n"
                  << text << read_text(err);
    return {};
  }
  return match[1];
}

bool can_run() { return have_dataset() && fs::exists(bin("lockstep")); }

TEST(FashionMnistSameBits, StateHashIsTheSameAtOneTwoAndFourWorkers) {
  if (!can_run()) GTEST_SKIP() << "needs dataset-fashion-mnist and the lockstep launcher";
  auto dir = scratch("same-bits");
  const std::string flags = "--same-bits --max-steps 20";
  const auto h1 = state_hash(dir, 1, flags);
  ASSERT_FALSE(h1.empty());
  EXPECT_EQ(state_hash(dir, 2, flags), h1);
  EXPECT_EQ(state_hash(dir, 4, flags), h1);
}

// The same 20 steps without --same-bits: -np 2 trains another batch, order
// and BatchNorm, so the hash differs.
TEST(FashionMnistSameBits, WithoutTheFlagTheHashChangesWithNp) {
  if (!can_run()) GTEST_SKIP() << "needs dataset-fashion-mnist and the lockstep launcher";
  auto dir = scratch("same-bits-off");
  const auto h1 = state_hash(dir, 1, "--max-steps 20");
  ASSERT_FALSE(h1.empty());
  EXPECT_NE(state_hash(dir, 2, "--max-steps 20"), h1);
}

// Epoch 1 at -np 2 with a checkpoint, epoch 2 resumed at -np 4: the state of
// 2 epochs straight at -np 1 (a constant schedule, which does not depend on
// --epochs).
TEST(FashionMnistSameBits, ResumeAtAnotherNpKeepsTheHash) {
  if (!can_run()) GTEST_SKIP() << "needs dataset-fashion-mnist and the lockstep launcher";
  auto dir = scratch("same-bits-resume");
  const std::string flags = "--same-bits --schedule constant --epochs ";
  const auto straight = state_hash(dir, 1, flags + "2");
  ASSERT_FALSE(straight.empty());
  const auto ckpt = fmt::format(" --checkpoint-dir '{}'", (dir / "ckpt").string());
  EXPECT_NE(state_hash(dir, 2, flags + "1" + ckpt), straight);
  EXPECT_EQ(state_hash(dir, 4, flags + "2 --resume" + ckpt), straight);
}

// Refused while parsing: status 2 and a message naming the flag and --same-bits.
TEST(FashionMnistSameBits, FlagsThatCannotGiveTheSameBitsAreRefusedByName) {
  auto dir = scratch("same-bits-refused");
  const std::pair<const char*, const char*> cases[] = {
      {"--same-bits --compression onebit", "--compression"},
      {"--same-bits --precision bf16", "--precision"},
      {"--same-bits --batch-size 32", "--batch-size"},
      {"--same-bits --sync-batch-norm", "--sync-batch-norm"},
      {"--same-bits --optimizer lamb", "--optimizer"},
      {"--same-bits --target-accuracy 0.9", "--target-accuracy"},
      {"--same-bits --global-batch 100", "--global-batch"},
      {"--global-batch 256", "--global-batch"},
  };
  for (const auto& [flags, named] : cases) {
    const auto err = dir / "err.txt";
    const auto cmd = fmt::format("'{}' {} 2>'{}'", main_job(), flags, err.string());
    EXPECT_EQ(exit_code(cmd), 2) << flags;
    const auto text = read_text(err);
    EXPECT_NE(text.find(named), std::string::npos) << flags << ": " << text;
    EXPECT_NE(text.find("--same-bits"), std::string::npos) << flags << ": " << text;
  }
}

// A world size that does not divide --micro-batches stops before training,
// naming the sizes that work.
TEST(FashionMnistSameBits, ThreeWorkersForEightMicroBatchesAreRefused) {
  if (!can_run()) GTEST_SKIP() << "needs dataset-fashion-mnist and the lockstep launcher";
  auto dir = scratch("same-bits-np3");
  const auto cmd = fmt::format("'{}' run -np 3 '{}' {} --same-bits >/dev/null 2>'{}'",
                               bin("lockstep"), main_job(), kSmall, (dir / "err.txt").string());
  EXPECT_NE(exit_code(cmd), 0);
  const auto text = read_text(dir / "err.txt");
  EXPECT_NE(text.find("over 3 workers"), std::string::npos) << text;
  EXPECT_NE(text.find("1, 2, 4, 8"), std::string::npos) << text;
}

}  // namespace
