// World-size-independent checkpoints: written by 2 workers (data-parallel or
// ZeRO), resumed by 1 and 3 workers of either kind, the run continues the
// uninterrupted single-process run's losses within 1e-5.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <filesystem>

#include "lockstep/parallel/checkpoint.h"
#include "lockstep/parallel/sharded_optimizer.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

using lockstep::torch::testing::run_torch_workers;
namespace lt = lockstep::torch;
using ::torch::Tensor;

constexpr int kBefore = 4, kAfter = 4;
constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2, 3

::torch::nn::Sequential make_model() {
  ::torch::manual_seed(9);
  return ::torch::nn::Sequential(::torch::nn::Linear(8, 20), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(20, 4));
}

std::pair<Tensor, Tensor> global_batch(int step) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(900 + step);
  return {::torch::randn({kGlobalBatch, 8}, g), ::torch::randn({kGlobalBatch, 4}, g)};
}

// One step on this rank's rows; returns the global batch's mean loss.
template <typename Wrapper>
double train_step(::torch::nn::Sequential& model, Wrapper& wrapper, int step) {
  auto [x, y] = global_batch(step);
  const int64_t rows = kGlobalBatch / lt::size();
  wrapper.zero_grad();
  auto loss = ::torch::nn::functional::mse_loss(
      model->forward(x.narrow(0, lt::rank() * rows, rows)), y.narrow(0, lt::rank() * rows, rows));
  loss.backward();
  wrapper.step();
  return lt::allreduce(loss.detach(), fmt::format("loss.{}", step)).item<double>();
}

std::vector<double> uninterrupted() {
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.02);
  std::vector<double> losses;
  for (int s = 0; s < kBefore + kAfter; ++s) {
    auto [x, y] = global_batch(s);
    adam.zero_grad();
    auto loss = ::torch::nn::functional::mse_loss(model->forward(x), y);
    loss.backward();
    adam.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

enum class Kind { kData, kZero };

void write(Kind kind, const std::string& path) {
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.02);
  if (kind == Kind::kZero) {
    ShardedOptimizer zero(adam, *model, {.stage = 2, .bucket_bytes = 256});
    for (int s = 0; s < kBefore; ++s) train_step(model, zero, s);
    save_checkpoint(path, *model, zero, {.epoch = 0, .step = kBefore, .sampler = {}, .user = {}});
  } else {
    lt::DistributedOptimizer dist(adam, *model);
    for (int s = 0; s < kBefore; ++s) train_step(model, dist, s);
    lt::save_checkpoint(path, *model, adam,
                        {.epoch = 0, .step = kBefore, .sampler = {}, .user = {}});
  }
}

void resume_and_compare(Kind kind, const std::string& path) {
  const std::vector<double> expected = uninterrupted();
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.02);
  lt::TrainingProgress progress;
  std::vector<double> losses;
  if (kind == Kind::kZero) {
    ShardedOptimizer zero(adam, *model, {.stage = 1, .bucket_bytes = 512});
    ASSERT_TRUE(load_checkpoint(path, *model, zero, progress));
    for (int s = kBefore; s < kBefore + kAfter; ++s) losses.push_back(train_step(model, zero, s));
  } else {
    ASSERT_TRUE(lt::load_checkpoint(path, *model, adam, progress));
    lt::DistributedOptimizer dist(adam, *model);
    for (int s = kBefore; s < kBefore + kAfter; ++s) losses.push_back(train_step(model, dist, s));
  }
  EXPECT_EQ(progress.step, kBefore);
  for (int i = 0; i < kAfter; ++i)
    EXPECT_NEAR(losses[i], expected[kBefore + i], 1e-5 * std::max(1.0, expected[kBefore + i]))
        << "step " << kBefore + i << " on " << lt::size() << " worker(s)";
}

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("lockstep-ckpt-{}-{}", ::getpid(), counter_++);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path() const { return (dir_ / "checkpoint.pt").string(); }
  std::filesystem::path dir_;
  static inline int counter_ = 0;
};

TEST_F(ResumeTest, ZeroAtTwoResumesAsZeroAtThreeAndPlainAtOne) {
  const std::string p = path();
  run_torch_workers(2, [&] { write(Kind::kZero, p); });
  run_torch_workers(3, [&] { resume_and_compare(Kind::kZero, p); });
  run_torch_workers(1, [&] { resume_and_compare(Kind::kData, p); });
}

TEST_F(ResumeTest, DataParallelAtTwoResumesAsZeroAtOneAndDataAtThree) {
  const std::string p = path();
  run_torch_workers(2, [&] { write(Kind::kData, p); });
  run_torch_workers(1, [&] { resume_and_compare(Kind::kZero, p); });
  run_torch_workers(3, [&] { resume_and_compare(Kind::kData, p); });
}

TEST_F(ResumeTest, MissingCheckpointIsReportedNotInvented) {
  const std::string p = path();
  run_torch_workers(2, [&] {
    auto model = make_model();
    ::torch::optim::Adam adam(model->parameters(), 0.02);
    ShardedOptimizer zero(adam, *model);
    lt::TrainingProgress progress;
    EXPECT_FALSE(load_checkpoint(p, *model, zero, progress));
  });
}

}  // namespace
}  // namespace lockstep::parallel
