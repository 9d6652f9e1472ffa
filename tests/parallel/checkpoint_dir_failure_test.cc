// Checkpoint directories under failure: a background write that fails is
// reported by the next save(), poll() and wait(); one rank's failed write
// fails the save on every rank, without a manifest; a live writer's folder is
// never cleaned up, a dead one's is; a SIGKILL of every rank
// during a 2-rank save (sync or async) leaves the previous checkpoint
// loadable, with the values of its own step, and the next load removes the
// interrupted step's folder.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gmock/gmock.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "lockstep/base/error.h"
#include "lockstep/parallel/checkpoint_dir.h"
#include "parallel/checkpoint_dir_impl.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

namespace fs = std::filesystem;
namespace lt = lockstep::torch;
using lockstep::torch::testing::run_torch_workers;

fs::path fresh(const std::string& tag) {
  auto dir = fs::temp_directory_path() / fmt::format("lockstep-ckdir-{}-{}", tag, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

::torch::nn::Sequential make_wide_model(int64_t width) {
  ::torch::manual_seed(1);
  return ::torch::nn::Sequential(::torch::nn::Linear(width, width), ::torch::nn::Linear(width, 8));
}

// Every parameter filled with `value`: a loaded checkpoint must be all one step's.
void fill(::torch::nn::Module& module, float value) {
  ::torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) p.fill_(value);
}

TEST(CheckpointDirFailure, BackgroundWriteErrorIsRethrownBySaveAndPollAndWait) {
  const fs::path dir = fresh("fail");
  const std::string root = (dir / "root").string();
  auto model = make_wide_model(16);
  ::torch::optim::SGD sgd(model->parameters(), 0.1);
  CheckpointWriter writer(root, {.async = true});
  fs::remove_all(root);
  std::ofstream(root) << "a file where the root directory should be";  // root cannot stop root
  writer.save(*model, sgd,
              {.epoch = 0, .step = 1, .sampler = {}, .user = {}});  // returns: snapshot only
  try {
    writer.save(*model, sgd, {.epoch = 0, .step = 2, .sampler = {}, .user = {}});
    ADD_FAILURE() << "the failed background write was not reported by the next save";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(root));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("Not a directory"));
  }
  writer.save(*model, sgd, {.epoch = 0, .step = 3, .sampler = {}, .user = {}});
  bool reported = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!reported && std::chrono::steady_clock::now() < give_up) {
    try {
      writer.poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } catch (const Error& e) {
      reported = true;
      EXPECT_THAT(e.what(), ::testing::HasSubstr(root));
    }
  }
  EXPECT_TRUE(reported) << "poll() never reported the failed write";
  writer.save(*model, sgd, {.epoch = 0, .step = 4, .sampler = {}, .user = {}});
  EXPECT_THROW(writer.wait(), Error);
  writer.wait();  // the error was reported once; nothing in flight now
  fs::remove_all(dir);
}

// Rank 1 cannot write its file (a directory stands at its name): rank 0 must
// not write the manifest, and every rank's save() (sync) or wait() (async)
// throws, rank 0's naming rank 1; the previous step stays the checkpoint.
void one_rank_fails(const std::string& root, bool async) {
  auto model = make_wide_model(16);
  ::torch::optim::SGD sgd(model->parameters(), 0.1);
  CheckpointWriter writer(root, {.async = async});
  writer.save(*model, sgd, {.epoch = 0, .step = 1, .sampler = {}, .user = {}});
  writer.wait();
  const std::string step = root + "/step-00000002";
  if (lt::rank() == 0) fs::create_directories(step + "/model-00002-of-00002.safetensors/blocked");
  lt::barrier();
  try {
    writer.save(*model, sgd, {.epoch = 0, .step = 2, .sampler = {}, .user = {}});
    writer.wait();
    ADD_FAILURE() << "rank " << lt::rank() << ": a save that rank 1 could not write succeeded";
  } catch (const Error& e) {
    if (lt::rank() == 0) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("rank 1"));
    }
  }
  EXPECT_FALSE(fs::exists(step + "/manifest.json")) << "a manifest without rank 1's file";
  EXPECT_EQ(newest_checkpoint_dir(root), root + "/step-00000001");
  lt::barrier();
}

TEST(CheckpointDirFailure, OneRanksFailedWriteFailsTheSaveOnEveryRankWithoutManifest) {
  const fs::path dir = fresh("one-fails");
  for (bool async : {false, true}) {
    const std::string root = (dir / (async ? "async" : "sync")).string();
    run_torch_workers(2, [&] { one_rank_fails(root, async); });
  }
  fs::remove_all(dir);
}

// A folder without a manifest is removed by a load only while no writer
// holds the root's shared lock: it may be a live writer's save in progress.
TEST(CheckpointDirFailure, LeftoversAreRemovedOnlyWhenNoWriterIsLive) {
  const fs::path dir = fresh("live");
  const std::string root = (dir / "ckpt").string();
  auto model = make_wide_model(16);
  ::torch::optim::SGD sgd(model->parameters(), 0.1);
  CheckpointWriter(root).save(*model, sgd, {.epoch = 0, .step = 1, .sampler = {}, .user = {}});
  fs::create_directories(root + "/step-00000002");  // a save in progress, or a killed one
  lt::TrainingProgress progress;
  {
    auto writer = detail::ckdir::RootLock::shared(root, std::chrono::seconds(1));
    ASSERT_TRUE(load_checkpoint_dir(root, *model, sgd, progress));
    EXPECT_EQ(progress.step, 1);
    EXPECT_TRUE(fs::exists(root + "/step-00000002")) << "a live writer's folder was removed";
  }
  ASSERT_TRUE(load_checkpoint_dir(root, *model, sgd, progress));
  EXPECT_FALSE(fs::exists(root + "/step-00000002")) << "the dead writer's folder stayed";
  fs::remove_all(dir);
}

// The child of one kill: 2 ranks saving steps first, first + 1, ... until killed.
[[noreturn]] void save_forever(const std::string& root, int64_t first, bool async) {
  ::setpgid(0, 0);  // the parent kills the whole group: this process and both ranks
  run_torch_workers(2, [&] {
    auto model = make_wide_model(512);  // ~1 MB of parameters + 1 MB of momentum per step
    ::torch::optim::SGD sgd(model->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
    CheckpointWriter writer(root, {.async = async});
    for (int64_t step = first; step < first + 100000; ++step) {
      fill(*model, static_cast<float>(step));
      writer.save(*model, sgd, {.epoch = 0, .step = step, .sampler = {}, .user = {}});
    }
  });
  ::_exit(0);
}

bool has_step_at_least(const std::string& root, int64_t step) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && std::stoll(name.substr(5)) >= step) return true;
  }
  return false;
}

bool has_incomplete_step(const std::string& root) {
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().filename().string().rfind("step-", 0) == 0 &&
        !fs::exists(e.path() / "manifest.json"))
      return true;
  return false;
}

void kill_during_saves(bool async) {
  ::torch::set_num_threads(1);                       // no thread pool across fork()
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // the ranks become ours to reap
  const fs::path dir = fresh(async ? "kill-async" : "kill-sync");
  const std::string root = (dir / "ckpt").string();
  {
    auto model = make_wide_model(512);
    fill(*model, 1.0f);
    ::torch::optim::SGD sgd(model->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
    CheckpointWriter(root).save(*model, sgd, {.epoch = 0, .step = 1, .sampler = {}, .user = {}});
  }
  std::mt19937 random(async ? 7 : 3);
  int interrupted = 0;
  int64_t last = 1;  // the newest complete step
  for (int kill = 0; kill < 6; ++kill) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) save_forever(root, last + 1, async);
    ::setpgid(child, child);
    // Wait for the ranks to be saving, then kill at a random moment of a save.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!has_step_at_least(root, last + 1) && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 40000));
    ::kill(-child, SIGKILL);
    while (::waitpid(-child, nullptr, 0) > 0) {  // the child and both ranks
    }
    interrupted += has_incomplete_step(root);
    auto model = make_wide_model(512);
    ::torch::optim::SGD sgd(model->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
    lt::TrainingProgress progress;
    ASSERT_TRUE(load_checkpoint_dir(root, *model, sgd, progress)) << "kill " << kill;
    for (const auto& p : model->parameters())
      ASSERT_TRUE(::torch::all(p == static_cast<float>(progress.step)).item<bool>())
          << "kill " << kill << ": step " << progress.step << " holds another step's values";
    EXPECT_FALSE(has_incomplete_step(root)) << "the load left an interrupted save's folder";
    EXPECT_GE(progress.step, last);
    last = progress.step;
  }
  EXPECT_GT(interrupted, 0) << "no kill landed during a save";
  fs::remove_all(dir);
}

TEST(CheckpointDirFailure, KillDuringShardedSaveLeavesThePreviousCheckpointLoadable) {
  kill_during_saves(/*async=*/false);
}

TEST(CheckpointDirFailure, KillDuringAsyncSaveLeavesThePreviousCheckpointLoadable) {
  kill_during_saves(/*async=*/true);
}

}  // namespace
}  // namespace lockstep::parallel
