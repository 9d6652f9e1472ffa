// LOCKSTEP_PROFILE: DistributedOptimizer records what the planner needs
// from a real (single-process) training loop.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include <torch/torch.h>

#include "lockstep/plan/profile.h"
#include "lockstep/torch/torch.h"

namespace lt = lockstep::torch;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "-" + std::to_string(::getpid()) + ".json"))
      .string();
}

void train(int steps, lt::Overlap overlap = lt::Overlap::kAuto) {
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                              torch::nn::Linear(16, 4));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  lt::DistributedOptimizer opt(sgd, *model, {.overlap = overlap});
  lt::DistributedSampler sampler({.dataset_size = 1000, .rank = 0, .size = 1});
  sampler.set_epoch(0);
  torch::Tensor data = torch::randn({1000, 8});
  for (int i = 0; i < steps; ++i) {
    auto batch = sampler.next_batch(10);
    auto x = data.index_select(0, torch::tensor(batch, torch::kInt64));
    opt.zero_grad();
    model->forward(x).pow(2).mean().backward();
    opt.step();
  }
}

TEST(PlanProfileRecorder, RecordsStepsGradientsAndSamples) {
  const std::string path = temp_path("lockstep-profile-test");
  std::filesystem::remove(path);
  setenv("LOCKSTEP_PROFILE", path.c_str(), 1);
  setenv("LOCKSTEP_PROFILE_WARMUP", "2", 1);
  setenv("LOCKSTEP_PROFILE_STEPS", "3", 1);
  train(4);
  EXPECT_FALSE(std::filesystem::exists(path)) << "written before warm-up + steps were done";
  EXPECT_TRUE(lt::profiling());
  // A new optimizer starts the recording over: 4 more steps are not enough.
  train(4);
  EXPECT_FALSE(std::filesystem::exists(path));
  // Regression (ProfileOverlapAlwaysFalse): the profile's `overlap` was
  // never set, so every recorded run read as overlap off.
  train(5, lt::Overlap::kOn);
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(lt::profiling());
  lockstep::plan::Profile p = lockstep::plan::load_profile(path);
  ASSERT_EQ(p.steps.size(), 3u);
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.warmup_steps, 2);
  EXPECT_TRUE(p.overlap);
  ASSERT_EQ(p.gradients.size(), 4u);
  EXPECT_EQ(p.gradients[0].name, "grad.0.weight");
  EXPECT_EQ(p.gradients[0].bytes, 16 * 8 * 4);
  EXPECT_EQ(p.gradients[3].bytes, 4 * 4);
  EXPECT_EQ(p.gradients[3].dtype, "f32");
  // Backward produces the last layer's gradients first.
  EXPECT_LE(p.gradients[2].ready_ms, p.gradients[0].ready_ms);
  for (const auto& s : p.steps) {
    EXPECT_EQ(s.samples, 10);
    EXPECT_GT(s.backward_ms, 0);
    EXPECT_GT(s.forward_ms, 0);
    EXPECT_GE(s.step_ms + 1e-9, s.forward_ms + s.backward_ms + s.sync_ms + s.optimizer_ms);
  }
  for (const auto& g : p.gradients)
    EXPECT_LE(g.ready_ms, lockstep::plan::summarize(p).backward_ms * 3);
  std::filesystem::remove(path);
}

TEST(PlanProfileRecorder, OffWithoutTheKnob) {
  unsetenv("LOCKSTEP_PROFILE");
  train(3);
  EXPECT_FALSE(lt::profiling());
}

}  // namespace
