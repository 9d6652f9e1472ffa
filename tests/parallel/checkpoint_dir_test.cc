// Checkpoint directories (lockstep/parallel/checkpoint_dir.h): a data-parallel
// model + Adam written at 2 ranks resumes at 2 (bitwise the uninterrupted
// run), 1 and 3 (the same losses to 1e-5); FSDP written at 2 loads at 1 and 3
// with the values lockstep::parallel::save_checkpoint's file holds; ZeRO at 2
// resumes as ZeRO at 3 and plain at 1; async
// writes the bytes sync writes; the model files load as plain safetensors
// through their index; retention keeps exactly K; another model is refused
// before anything changes.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/base/error.h"
#include "lockstep/parallel/checkpoint.h"
#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/parallel/sharded_optimizer.h"
#include "lockstep/torch/safetensors.h"
#include "parallel/fsdp_helpers.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

namespace fs = std::filesystem;
namespace lt = lockstep::torch;
using lockstep::torch::testing::flat_parameters;
using lockstep::torch::testing::run_torch_workers;
using ::torch::Tensor;

constexpr int kBefore = 3, kAfter = 3;
constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2, 3

::torch::nn::Sequential make_model(int64_t width = 20) {
  ::torch::manual_seed(9);
  return ::torch::nn::Sequential(::torch::nn::Linear(8, width), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(width, 4));
}

// One data-parallel (or ZeRO) step on this rank's rows; the global batch's mean loss.
template <typename Wrapper>
double train_step(::torch::nn::Sequential& model, Wrapper& dist, int step) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(900 + step);
  auto x = ::torch::randn({kGlobalBatch, 8}, g), y = ::torch::randn({kGlobalBatch, 4}, g);
  const int64_t rows = kGlobalBatch / lt::size();
  dist.zero_grad();
  auto loss = ::torch::nn::functional::mse_loss(
      model->forward(x.narrow(0, lt::rank() * rows, rows)), y.narrow(0, lt::rank() * rows, rows));
  loss.backward();
  dist.step();
  return lt::allreduce(loss.detach(), fmt::format("loss.{}", step)).item<double>();
}

class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("lockstep-ckdir-{}-{}", ::getpid(), counter_++);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string root(const std::string& name = "ckpt") const { return (dir_ / name).string(); }
  fs::path dir_;
  static inline int counter_ = 0;
};

// Written by the 2-rank run: the losses after the save and the final parameters.
void write_and_continue(const std::string& root, const std::string& reference) {
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.02);
  lt::DistributedOptimizer dist(adam, *model);
  for (int s = 0; s < kBefore; ++s) train_step(model, dist, s);
  CheckpointWriter writer(root);
  writer.save(*model, adam, {.epoch = 1, .step = kBefore, .sampler = "pos 7", .user = "u"});
  std::vector<double> losses;
  for (int s = kBefore; s < kBefore + kAfter; ++s) losses.push_back(train_step(model, dist, s));
  if (lt::rank() == 0)
    ::torch::save(
        std::vector<Tensor>{::torch::tensor(losses, ::torch::kFloat64), flat_parameters(*model)},
        reference);
}

void resume_and_compare(const std::string& root, const std::string& reference, bool bitwise) {
  std::vector<Tensor> expected;
  ::torch::load(expected, reference);
  auto model = make_model(20);
  {
    ::torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.fill_(0.5);  // the load must replace these
  }
  ::torch::optim::Adam adam(model->parameters(), 0.02);
  lt::TrainingProgress progress;
  ASSERT_TRUE(load_checkpoint_dir(root, *model, adam, progress));
  EXPECT_EQ(progress.step, kBefore);
  EXPECT_EQ(progress.epoch, 1);
  EXPECT_EQ(progress.sampler, "pos 7");
  EXPECT_EQ(progress.user, "u");
  lt::DistributedOptimizer dist(adam, *model);
  for (int i = 0; i < kAfter; ++i) {
    const double loss = train_step(model, dist, kBefore + i);
    const double want = expected[0][i].item<double>();
    if (bitwise) {
      EXPECT_EQ(loss, want) << "step " << kBefore + i;
    } else {
      EXPECT_NEAR(loss, want, 1e-5 * std::max(1.0, want))
          << "step " << kBefore + i << " at " << lt::size();
    }
  }
  if (bitwise) {
    EXPECT_TRUE(::torch::equal(flat_parameters(*model), expected[1]));
  }
}

TEST_F(CheckpointDirTest, DataParallelAtTwoResumesBitwiseAtTwoAndAtOneAndThree) {
  const std::string r = root(), ref = (dir_ / "reference.pt").string();
  run_torch_workers(2, [&] { write_and_continue(r, ref); });
  ASSERT_TRUE(fs::is_regular_file(r + "/step-00000003/manifest.json"));
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                        "optimizer-00001-of-00002.safetensors",
                        "optimizer-00002-of-00002.safetensors", "model.safetensors.index.json"})
    EXPECT_TRUE(fs::is_regular_file(r + "/step-00000003/" + f)) << f;
  EXPECT_FALSE(fs::exists(r + "/step-00000003/rank-0.done")) << "markers are removed";
  run_torch_workers(2, [&] { resume_and_compare(r, ref, /*bitwise=*/true); });
  run_torch_workers(1, [&] { resume_and_compare(r, ref, false); });
  run_torch_workers(3, [&] { resume_and_compare(r, ref, false); });
}

// ZeRO (ShardedOptimizer) saves through its full view and loads into ZeRO at
// another world size or into a plain optimizer.
void write_zero_and_continue(const std::string& root, const std::string& reference) {
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.02);
  ShardedOptimizer zero(adam, *model, {.stage = 2, .bucket_bytes = 256});
  for (int s = 0; s < kBefore; ++s) train_step(model, zero, s);
  CheckpointWriter(root, {.async = true})
      .save(*model, zero, {.epoch = 0, .step = kBefore, .sampler = {}, .user = {}});
  std::vector<double> losses;
  for (int s = kBefore; s < kBefore + kAfter; ++s) losses.push_back(train_step(model, zero, s));
  if (lt::rank() == 0) ::torch::save(::torch::tensor(losses, ::torch::kFloat64), reference);
}

void resume_zero_and_compare(const std::string& root, const std::string& reference) {
  Tensor expected;
  ::torch::load(expected, reference);
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.02);
  lt::TrainingProgress progress;
  std::vector<double> losses;
  if (lt::size() == 1) {
    ASSERT_TRUE(load_checkpoint_dir(root, *model, adam, progress));
    lt::DistributedOptimizer dist(adam, *model);
    for (int s = kBefore; s < kBefore + kAfter; ++s) losses.push_back(train_step(model, dist, s));
  } else {
    ShardedOptimizer zero(adam, *model, {.stage = 1, .bucket_bytes = 512});
    ASSERT_TRUE(load_checkpoint_dir(root, *model, zero, progress));
    for (int s = kBefore; s < kBefore + kAfter; ++s) losses.push_back(train_step(model, zero, s));
  }
  EXPECT_EQ(progress.step, kBefore);
  for (int i = 0; i < kAfter; ++i)
    EXPECT_NEAR(losses[i], expected[i].item<double>(), 1e-5)
        << "step " << kBefore + i << " at " << lt::size();
}

TEST_F(CheckpointDirTest, ZeroAtTwoResumesAsZeroAtThreeAndPlainAtOne) {
  const std::string r = root(), ref = (dir_ / "zero.pt").string();
  run_torch_workers(2, [&] { write_zero_and_continue(r, ref); });
  run_torch_workers(3, [&] { resume_zero_and_compare(r, ref); });
  run_torch_workers(1, [&] { resume_zero_and_compare(r, ref); });
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST_F(CheckpointDirTest, AsyncSaveWritesTheBytesSyncSaveWrites) {
  const std::string sync_root = root("sync"), async_root = root("async");
  run_torch_workers(2, [&] {
    auto model = make_model();
    ::torch::optim::Adam adam(model->parameters(), 0.02);
    lt::DistributedOptimizer dist(adam, *model);
    for (int s = 0; s < kBefore; ++s) train_step(model, dist, s);
    CheckpointWriter sync(sync_root), async(async_root, {.async = true});
    const lt::TrainingProgress progress{.epoch = 0, .step = kBefore, .sampler = "s", .user = {}};
    sync.save(*model, adam, progress);
    async.save(*model, adam, progress);
    train_step(model, dist, kBefore);  // changes parameters and moments while the write runs
    async.wait();
  });
  const fs::path a = fs::path(sync_root) / "step-00000003",
                 b = fs::path(async_root) / "step-00000003";
  int files = 0;
  for (const auto& e : fs::directory_iterator(a)) {
    ++files;
    EXPECT_EQ(file_bytes(e.path()), file_bytes(b / e.path().filename())) << e.path().filename();
  }
  EXPECT_EQ(files, 6);  // 2 model files, 2 optimizer files, the index, the manifest
  EXPECT_EQ(std::distance(fs::directory_iterator(b), fs::directory_iterator()), files);
}

// A model with buffers: BatchNorm's running statistics are saved too.
::torch::nn::Sequential make_bn_model() {
  ::torch::manual_seed(4);
  return ::torch::nn::Sequential(::torch::nn::Linear(6, 10), ::torch::nn::BatchNorm1d(10),
                                 ::torch::nn::Linear(10, 3));
}

TEST_F(CheckpointDirTest, ModelFilesArePlainSafetensorsThroughTheirIndex) {
  const std::string r = root(), ref = (dir_ / "state.pt").string();
  run_torch_workers(2, [&] {
    auto model = make_bn_model();
    ::torch::optim::Adam adam(model->parameters(), 0.02);
    model->forward(::torch::randn({8, 6})).sum().backward();  // moves the running stats
    adam.step();
    CheckpointWriter(r).save(*model, adam, {.epoch = 0, .step = 1, .sampler = {}, .user = {}});
    if (lt::rank() == 0) ::torch::save(model, ref);
  });
  auto expected = make_bn_model();
  ::torch::load(expected, ref);
  const std::string step = r + "/step-00000001";
  auto contents = lt::load_safetensors_sharded(step + "/model.safetensors.index.json");
  std::map<std::string, Tensor> by_name(contents.tensors.begin(), contents.tensors.end());
  size_t count = 0;
  for (const auto& item : expected->named_parameters()) {
    ++count;
    ASSERT_TRUE(by_name.count(item.key())) << item.key();
    EXPECT_TRUE(::torch::equal(by_name[item.key()], item.value())) << item.key();
  }
  for (const auto& item : expected->named_buffers()) {
    ++count;
    ASSERT_TRUE(by_name.count(item.key())) << item.key();
    EXPECT_TRUE(::torch::equal(by_name[item.key()], item.value())) << item.key();
  }
  EXPECT_EQ(by_name.size(), count);
  EXPECT_TRUE(by_name.count("1.running_mean"));
  // Both ranks wrote a share; the optimizer's moments are named per parameter.
  EXPECT_FALSE(lt::read_safetensors_info(step + "/model-00001-of-00002.safetensors").empty());
  EXPECT_FALSE(lt::read_safetensors_info(step + "/model-00002-of-00002.safetensors").empty());
  std::vector<std::string> state;
  for (int f = 1; f <= 2; ++f)
    for (const auto& info : lt::read_safetensors_info(
             fmt::format("{}/optimizer-{:05d}-of-00002.safetensors", step, f)))
      state.push_back(info.name);
  EXPECT_THAT(
      state, ::testing::IsSupersetOf({"0.weight.exp_avg", "0.weight.exp_avg_sq", "0.weight.step"}));
}

// Written at 2 by FSDP; the reference is the whole-model file of
// lockstep::parallel::save_checkpoint at the same moment.
void write_fsdp(const std::string& root, const std::string& reference) {
  ::torch::manual_seed(3);
  auto model = ::torch::nn::Sequential(::torch::nn::Linear(8, 16), ::torch::nn::Tanh(),
                                       ::torch::nn::Linear(16, 24), ::torch::nn::Tanh(),
                                       ::torch::nn::Linear(24, 4));
  FullyShardedModel fsdp(model, {.layers_per_unit = 2, .name = "ckdir"});
  ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
  for (int s = 0; s < 3; ++s) {
    auto [x, y] = testing::local_batch(s);
    fsdp.zero_grad();
    ::torch::nn::functional::mse_loss(fsdp.forward(x), y).backward();
    fsdp.step(adam);
  }
  const lt::TrainingProgress progress{.epoch = 0, .step = 3, .sampler = {}, .user = {}};
  CheckpointWriter(root, {.async = true}).save(fsdp, adam, progress);
  save_checkpoint(reference, fsdp, adam, progress);
}

::torch::nn::Sequential fresh_fsdp_model() {
  ::torch::manual_seed(11);  // other values than the saved ones
  return ::torch::nn::Sequential(::torch::nn::Linear(8, 16), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(16, 24), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(24, 4));
}

// Parameters and every optimizer state tensor, in the optimizer's order.
Tensor everything(::torch::nn::Module& module, ::torch::optim::Optimizer& optimizer) {
  std::vector<Tensor> parts{flat_parameters(module)};
  for (const auto& p : optimizer.param_groups()[0].params())
    for (const auto& [key, value] : state_values(*optimizer.state().at(state_key(p))))
      if (value.isTensor() && !value.toTensor().defined())
        continue;
      else if (value.isTensor())
        parts.push_back(value.toTensor().flatten().to(::torch::kFloat64));
      else
        parts.push_back(::torch::tensor({static_cast<double>(value.toInt())}, ::torch::kFloat64));
  return ::torch::cat(parts);
}

void load_fsdp_and_compare(const std::string& root, const std::string& reference) {
  auto dense = fresh_fsdp_model();
  ::torch::optim::Adam dense_adam(dense->parameters(), 0.01);
  lt::TrainingProgress progress;
  ASSERT_TRUE(lt::load_checkpoint(reference, *dense, dense_adam, progress));
  const Tensor expected = everything(*dense, dense_adam);
  auto model = fresh_fsdp_model();
  if (lt::size() == 1) {
    ::torch::optim::Adam adam(model->parameters(), 0.01);
    ASSERT_TRUE(load_checkpoint_dir(root, *model, adam, progress));
    EXPECT_TRUE(::torch::equal(everything(*model, adam), expected));
    return;
  }
  FullyShardedModel fsdp(model, {.layers_per_unit = 1, .name = "ckdir3"});
  ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
  ASSERT_TRUE(load_checkpoint_dir(root, fsdp, adam, progress));
  EXPECT_EQ(progress.step, 3);
  fsdp.with_full_view(adam, /*keep_changes=*/false, [&] {
    EXPECT_TRUE(::torch::equal(everything(fsdp.wrapped(), adam), expected));
  });
}

TEST_F(CheckpointDirTest, FullyShardedAtTwoLoadsAtOneAndThree) {
  const std::string r = root(), ref = (dir_ / "fsdp.pt").string();
  run_torch_workers(2, [&] { write_fsdp(r, ref); });
  run_torch_workers(1, [&] { load_fsdp_and_compare(r, ref); });
  run_torch_workers(3, [&] { load_fsdp_and_compare(r, ref); });
}

TEST_F(CheckpointDirTest, RetentionKeepsExactlyTheNewestK) {
  for (bool async : {false, true}) {
    const std::string r = root(async ? "async" : "sync");
    auto model = make_model();
    ::torch::optim::SGD sgd(model->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
    CheckpointWriter writer(r, {.keep_last = 2, .async = async});
    for (int64_t step = 1; step <= 5; ++step)
      writer.save(*model, sgd, {.epoch = 0, .step = step, .sampler = {}, .user = {}});
    writer.wait();
    std::vector<std::string> steps;
    for (const auto& e : fs::directory_iterator(r))
      if (e.path().filename().string().rfind("step-", 0) == 0) steps.push_back(e.path().filename());
    std::sort(steps.begin(), steps.end());
    EXPECT_EQ(steps, (std::vector<std::string>{"step-00000004", "step-00000005"}))
        << "async " << async;
    EXPECT_EQ(newest_checkpoint_dir(r), r + "/step-00000005");
  }
}

TEST_F(CheckpointDirTest, AnotherModelIsRefusedBeforeAnythingChanges) {
  const std::string r = root();
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.02);
  model->forward(::torch::randn({4, 8})).sum().backward();
  adam.step();
  CheckpointWriter(r).save(*model, adam, {.epoch = 0, .step = 7, .sampler = {}, .user = {}});

  auto other = make_model(/*width=*/24);  // 0.weight is [24, 8] here, [20, 8] in the files
  ::torch::optim::Adam other_adam(other->parameters(), 0.02);
  other->forward(::torch::randn({4, 8})).sum().backward();
  other_adam.step();
  const Tensor before = everything(*other, other_adam).clone();
  lt::TrainingProgress progress{.epoch = 5, .step = 50, .sampler = "mine", .user = {}};
  try {
    load_checkpoint_dir(r, *other, other_adam, progress);
    ADD_FAILURE() << "another model's shapes were accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("0.weight"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("step-00000007"));
  }
  EXPECT_TRUE(::torch::equal(everything(*other, other_adam), before))
      << "the model or optimizer changed";
  EXPECT_EQ(progress.step, 50);
  EXPECT_EQ(progress.sampler, "mine");
  // Another optimizer type over the right model is refused too, naming both.
  auto same = make_model();
  ::torch::optim::SGD sgd(same->parameters(), 0.1);
  try {
    load_checkpoint_dir(r, *same, sgd, progress);
    ADD_FAILURE() << "an SGD loaded Adam's state";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("torch::optim::Adam"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("torch::optim::SGD"));
  }
  EXPECT_EQ(progress.step, 50);
}

TEST_F(CheckpointDirTest, NoCheckpointIsFalseAndTheSameStepTwiceIsRefused) {
  const std::string r = root();
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.02);
  lt::TrainingProgress progress;
  EXPECT_FALSE(load_checkpoint_dir(r, *model, adam, progress));
  CheckpointWriter writer(r);
  writer.save(*model, adam, {.epoch = 0, .step = 2, .sampler = {}, .user = {}});
  EXPECT_THROW(writer.save(*model, adam, {.epoch = 0, .step = 2, .sampler = {}, .user = {}}),
               InvalidArgument);
}

}  // namespace
}  // namespace lockstep::parallel
