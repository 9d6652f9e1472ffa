// The routed save and load of checkpoint directories for FullyShardedModel
// and ShardedOptimizer (Note [Routed checkpoint saves] in
// src/parallel/checkpoint_dir_routed_save.cc): every tensor goes straight
// from the ranks holding its pieces to the rank writing it, with no full
// view. The reference is the full-view save of the same state (the whole
// model on every rank, written by the data-parallel path): the routed save
// must write the same files byte for byte, for element and whole-tensor
// shards, mixed precision, ZeRO stages 1 and 2, uneven shards (3 ranks), a
// module with root parameters, and HSDP; a routed load must restore the
// values the full view holds, and refuse another model before any shard
// changes.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/base/error.h"
#include "lockstep/optim/lamb.h"
#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/parallel/mesh.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/parallel/sharded_optimizer.h"
#include "parallel/fsdp_helpers.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

namespace fs = std::filesystem;
namespace lt = lockstep::torch;
namespace nn = ::torch::nn;
using lockstep::torch::testing::flat_parameters;
using lockstep::torch::testing::run_torch_workers;
using ::torch::Tensor;

const lt::TrainingProgress kProgress{.epoch = 2, .step = 3, .sampler = "pos 5", .user = "u"};

nn::Sequential make_model(uint64_t seed = 3, int64_t width = 24) {
  ::torch::manual_seed(seed);
  return nn::Sequential(nn::Linear(8, 16), nn::Tanh(), nn::Linear(16, width), nn::Tanh(),
                        nn::Linear(width, 4));
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Every file of step 3 of `a` equals its namesake in `b`.
void expect_same_files(const std::string& a, const std::string& b) {
  const fs::path da = fs::path(a) / "step-00000003", db = fs::path(b) / "step-00000003";
  ASSERT_TRUE(fs::is_regular_file(da / "manifest.json"));
  int files = 0;
  for (const auto& e : fs::directory_iterator(da)) {
    ++files;
    EXPECT_EQ(file_bytes(e.path()), file_bytes(db / e.path().filename())) << e.path().filename();
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(db), fs::directory_iterator()), files);
}

// Parameters and every optimizer state value, in the optimizer's order.
Tensor everything(nn::Module& module, ::torch::optim::Optimizer& optimizer) {
  std::vector<Tensor> parts{flat_parameters(module)};
  for (const auto& b : module.buffers()) parts.push_back(b.flatten().to(::torch::kFloat64));
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) {
      auto it = optimizer.state().find(state_key(p));
      if (it == optimizer.state().end()) continue;
      for (const auto& [key, value] : state_values(*it->second))
        if (value.isTensor() && value.toTensor().defined())
          parts.push_back(value.toTensor().flatten().to(::torch::kFloat64));
        else if (value.isInt())
          parts.push_back(::torch::tensor({static_cast<double>(value.toInt())}, ::torch::kFloat64));
    }
  return ::torch::cat(parts);
}

struct FsdpCase {
  std::string optimizer = "adam";  // "lamb": whole-tensor shards
  std::optional<::torch::ScalarType> compute;
};

void train(FullyShardedModel& fsdp, ::torch::optim::Optimizer& optimizer, int steps) {
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = testing::local_batch(s);
    fsdp.zero_grad();
    ::torch::nn::functional::mse_loss(fsdp.forward(x).to(::torch::kFloat), y).backward();
    fsdp.step(optimizer);
  }
}

// Saves the same state twice: routed into `routed`, and through the full
// view and the data-parallel save into `full`.
void save_fsdp_both(const FsdpCase& c, const std::string& routed, const std::string& full,
                    FullyShardedOptions options = {}) {
  auto model = make_model();
  // Whole tensors: one unit, so that every rank of 3 holds a tensor (the
  // full view of a rank holding none lacks optimizer state).
  options.layers_per_unit = c.optimizer == "lamb" ? 5 : 2;
  options.granularity = c.optimizer == "lamb" ? ShardGranularity::kTensor : ShardGranularity::kAuto;
  options.compute_dtype = c.compute;
  FullyShardedModel fsdp(model, options);
  auto optimizer = testing::make_optimizer(c.optimizer, fsdp.parameters());
  train(fsdp, *optimizer, 3);
  CheckpointWriter(routed).save(fsdp, *optimizer, kProgress);
  CheckpointWriter reference(full);
  fsdp.with_full_view(*optimizer, /*keep_changes=*/false,
                      [&] { reference.save(fsdp.wrapped(), *optimizer, kProgress); });
}

class RoutedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("lockstep-routed-{}-{}", ::getpid(), counter_++);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string root(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
  static inline int counter_ = 0;
};

TEST_F(RoutedCheckpointTest, FsdpWritesTheFullViewsFilesAtTwoAndThree) {
  for (int ranks : {2, 3})
    for (const FsdpCase& c : {FsdpCase{}, FsdpCase{.optimizer = "lamb", .compute = std::nullopt},
                              FsdpCase{.optimizer = "adam", .compute = ::torch::kBFloat16}}) {
      SCOPED_TRACE(fmt::format("{} ranks, {}{}", ranks, c.optimizer, c.compute ? ", bf16" : ""));
      const std::string tag = fmt::format("{}-{}-{}", ranks, c.optimizer, c.compute.has_value());
      const std::string a = root("routed-" + tag), b = root("full-" + tag);
      run_torch_workers(ranks, [&] { save_fsdp_both(c, a, b); });
      expect_same_files(a, b);
    }
}

TEST_F(RoutedCheckpointTest, HsdpWritesTheFullViewsFilesAndLoadsBack) {
  const std::string a = root("routed"), b = root("full");
  run_torch_workers(4, [&] {
    Mesh mesh({{"replicate", 2}, {"shard", 2}});
    save_fsdp_both({}, a, b, {.group = mesh.group("shard"), .replicate = mesh.group("replicate")});
  });
  expect_same_files(a, b);
}

// A routed load at `ranks` holds what the full view's load holds.
void load_fsdp_and_compare(const std::string& root, const FsdpCase& c) {
  auto dense = make_model(/*seed=*/11);
  auto dense_opt = testing::make_optimizer(c.optimizer, dense->parameters());
  lt::TrainingProgress dense_progress;
  ASSERT_TRUE(load_checkpoint_dir(root, *dense, *dense_opt, dense_progress));
  const Tensor expected = everything(*dense, *dense_opt);
  auto model = make_model(/*seed=*/11);  // other values than the saved ones
  FullyShardedModel fsdp(model, {.layers_per_unit = c.optimizer == "lamb" ? 5 : 1,
                                 .granularity = c.optimizer == "lamb" ? ShardGranularity::kTensor
                                                                      : ShardGranularity::kAuto});
  auto optimizer = testing::make_optimizer(c.optimizer, fsdp.parameters());
  lt::TrainingProgress progress;
  ASSERT_TRUE(load_checkpoint_dir(root, fsdp, *optimizer, progress));
  EXPECT_EQ(progress.step, 3);
  EXPECT_EQ(progress.sampler, "pos 5");
  fsdp.with_full_view(*optimizer, /*keep_changes=*/false, [&] {
    EXPECT_TRUE(::torch::equal(everything(fsdp.wrapped(), *optimizer), expected));
  });
  train(fsdp, *optimizer, 1);  // and it trains on
}

TEST_F(RoutedCheckpointTest, FsdpLoadsItsOwnRangesAtOneTwoAndThree) {
  for (const FsdpCase& c : {FsdpCase{}, FsdpCase{.optimizer = "lamb", .compute = std::nullopt}}) {
    SCOPED_TRACE(c.optimizer);
    const std::string a = root("routed-" + c.optimizer), b = root("full-" + c.optimizer);
    run_torch_workers(2, [&] { save_fsdp_both(c, a, b); });
    for (int ranks : {2, 3}) run_torch_workers(ranks, [&] { load_fsdp_and_compare(a, c); });
  }
}

// Whole-tensor shards at 3 ranks in units of one layer: rank 2 holds no
// tensor at all (two per unit), so it learns the optimizer state's keys from
// the others. What it saved loads at 2 as the dense reader reads it.
TEST_F(RoutedCheckpointTest, ARankHoldingNoTensorSavesAndLoads) {
  const std::string a = root("routed");
  run_torch_workers(3, [&] {
    auto model = make_model();
    FullyShardedModel fsdp(model, {.layers_per_unit = 1, .granularity = ShardGranularity::kTensor});
    EXPECT_TRUE(lt::rank() != 2 || fsdp.parameters().empty());
    auto lamb = testing::make_optimizer("lamb", fsdp.parameters());
    train(fsdp, *lamb, 3);
    CheckpointWriter(a).save(fsdp, *lamb, kProgress);
  });
  run_torch_workers(
      2, [&] { load_fsdp_and_compare(a, {.optimizer = "lamb", .compute = std::nullopt}); });
}

// A module whose parameters outside the units (the root unit) stay gathered.
struct NetImpl : nn::Module {
  NetImpl() {
    ::torch::manual_seed(5);
    embed = register_module("embed", fsdp_unit(nn::Linear(8, 12)));
    body = register_module("body", fsdp_unit(nn::Linear(12, 12)));
    head = register_module("head", nn::Linear(12, 4));
    norm = register_module("norm", nn::BatchNorm1d(12));
  }
  Tensor forward(const Tensor& x) {
    return head->forward(norm->forward(::torch::tanh(body->forward(embed->forward(x)))));
  }
  FullyShardedUnit embed{nullptr}, body{nullptr};
  nn::Linear head{nullptr};
  nn::BatchNorm1d norm{nullptr};
};
class Net : public nn::ModuleHolder<NetImpl> {
 public:
  using nn::ModuleHolder<NetImpl>::ModuleHolder;
};

// The same batch on every rank, so that BatchNorm's running statistics (whole
// on every rank, written by one) are the same everywhere.
Tensor net_step(Net& net, FullyShardedModel& fsdp, ::torch::optim::Optimizer& adam, int s) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(700 + s);
  auto x = ::torch::randn({8, 8}, g), y = ::torch::randn({8, 4}, g);
  fsdp.zero_grad();
  auto out = net->forward(x);
  ::torch::nn::functional::mse_loss(out, y).backward();
  fsdp.step(adam);
  return out.detach();
}

TEST_F(RoutedCheckpointTest, RootParametersAndBuffersRoundTripAtAnotherSize) {
  const std::string a = root("routed"), b = root("full"), ref = root("out.pt");
  run_torch_workers(2, [&] {
    Net net;
    FullyShardedModel fsdp(net.ptr());
    ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
    for (int s = 0; s < 3; ++s) net_step(net, fsdp, adam, s);
    CheckpointWriter(a, {.async = true}).save(fsdp, adam, kProgress);
    CheckpointWriter full(b);
    fsdp.with_full_view(adam, false, [&] { full.save(fsdp.wrapped(), adam, kProgress); });
    net->eval();
    const Tensor out = net->forward(::torch::ones({2, 8}));
    if (lt::rank() == 0) ::torch::save(out, ref);
  });
  expect_same_files(a, b);
  run_torch_workers(3, [&] {
    Net net;
    FullyShardedModel fsdp(net.ptr());
    ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
    net_step(net, fsdp, adam, 0);  // state to replace, and the root unit gathered
    lt::TrainingProgress progress;
    ASSERT_TRUE(load_checkpoint_dir(a, fsdp, adam, progress));
    Tensor expected;
    ::torch::load(expected, ref);
    net->eval();
    EXPECT_TRUE(::torch::equal(net->forward(::torch::ones({2, 8})), expected));
  });
}

void save_zero_both(int stage, const std::string& routed, const std::string& full) {
  auto model = make_model();
  ::torch::optim::Adam adam(model->parameters(), 0.02);
  ShardedOptimizer zero(adam, *model, {.stage = stage, .bucket_bytes = 256});
  for (int s = 0; s < 3; ++s) {
    auto [x, y] = testing::local_batch(s);
    zero.zero_grad();
    ::torch::nn::functional::mse_loss(model->forward(x), y).backward();
    zero.step();
  }
  CheckpointWriter(routed).save(*model, zero, kProgress);
  CheckpointWriter reference(full);
  zero.with_full_view(zero.gather_full_state(), [&] { reference.save(*model, adam, kProgress); });
}

TEST_F(RoutedCheckpointTest, ZeroWritesTheFullViewsFilesAndLoadsItsRanges) {
  for (int stage : {1, 2}) {
    const std::string a = root(fmt::format("routed-{}", stage)),
                      b = root(fmt::format("full-{}", stage));
    run_torch_workers(3, [&] { save_zero_both(stage, a, b); });
    expect_same_files(a, b);
    run_torch_workers(2, [&] {
      auto dense = make_model(11);
      ::torch::optim::Adam dense_adam(dense->parameters(), 0.02);
      lt::TrainingProgress progress;
      ASSERT_TRUE(load_checkpoint_dir(b, *dense, dense_adam, progress));
      auto model = make_model(11);
      ::torch::optim::Adam adam(model->parameters(), 0.02);
      ShardedOptimizer zero(adam, *model, {.stage = stage, .bucket_bytes = 512});
      ASSERT_TRUE(load_checkpoint_dir(a, *model, zero, progress));
      zero.with_full_view(zero.gather_full_state(), [&] {
        EXPECT_TRUE(::torch::equal(everything(*model, adam), everything(*dense, dense_adam)));
      });
    });
  }
}

TEST_F(RoutedCheckpointTest, AnotherModelIsRefusedBeforeAnyShardChanges) {
  const std::string a = root("routed"), b = root("full");
  run_torch_workers(2, [&] { save_fsdp_both({}, a, b); });
  run_torch_workers(2, [&] {
    auto model = make_model(11, /*width=*/20);
    FullyShardedModel fsdp(model, {.layers_per_unit = 2});
    ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
    std::vector<Tensor> before;
    for (const auto& p : fsdp.parameters()) before.push_back(p.clone());
    lt::TrainingProgress progress;
    try {
      load_checkpoint_dir(a, fsdp, adam, progress);
      ADD_FAILURE() << "a checkpoint of another model loaded";
    } catch (const lockstep::Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("'2.weight'")) << e.what();
    }
    const auto after = fsdp.parameters();
    for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(::torch::equal(before[i], after[i]));
    EXPECT_EQ(progress.step, 0);
    train(fsdp, adam, 1);
  });
}

}  // namespace
}  // namespace lockstep::parallel
