// A checkpoint writer killed mid-write leaves a temporary file that the next
// start-up (load_checkpoint) removes (Note [Checkpoint temporary files]).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "lockstep/torch/checkpoint.h"
#include "torch/temp_files.h"

namespace lockstep::torch {
namespace {

namespace fs = std::filesystem;
using testing::fresh_dir;
using testing::temps_of;

// The bug: a kill during a checkpoint write left `.checkpoint.pt.tmp.<pid>`,
// as big as the checkpoint, and nothing ever removed it.
TEST(CheckpointTemps, KilledWritersTempIsRemovedAtStartup) {
  ::torch::set_num_threads(1);
  const std::string dir = fresh_dir("ckpt-killed");
  const std::string path = dir + "/ckpt.pt";
  auto big = ::torch::nn::Linear(1500, 1500);  // ~9 MB per checkpoint
  ::torch::optim::SGD sgd(big->parameters(), 0.1);
  save_checkpoint(path, *big, sgd, {.step = 1, .sampler = {}, .user = {}});
  EXPECT_TRUE(temps_of(dir, "ckpt.pt").empty()) << "a completed write left its temp file";
  // Kill the writer the moment its temp file shows up, i.e. mid-write, until
  // one kill left the file behind (the rename may win the race now and then).
  int kills = 0;
  bool left_behind = false;
  while (!left_behind && kills < 5) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0)
      for (int64_t step = 2;; ++step)
        save_checkpoint(path, *big, sgd, {.step = step, .sampler = {}, .user = {}});
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (temps_of(dir, "ckpt.pt").empty() && std::chrono::steady_clock::now() < give_up) {
    }
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    ++kills;
    left_behind = !temps_of(dir, "ckpt.pt").empty();
    auto fresh = ::torch::nn::Linear(1500, 1500);
    ::torch::optim::SGD fresh_sgd(fresh->parameters(), 0.1);
    TrainingProgress progress;
    ASSERT_TRUE(load_checkpoint(path, *fresh, fresh_sgd, progress));  // the start-up
    EXPECT_EQ(temps_of(dir, "ckpt.pt"), std::vector<std::string>{}) << "after kill " << kills;
  }
  EXPECT_TRUE(left_behind) << "no kill landed mid-write in " << kills << " tries";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lockstep::torch
