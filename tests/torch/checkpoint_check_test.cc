// Loads that must refuse before touching anything (issue 43 items 1 and 3):
// a checkpoint of another architecture, shapes or dtype; files that are not
// lockstep checkpoints; a sampler state taken at another world size.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "lockstep/base/error.h"
#include "lockstep/torch/checkpoint.h"
#include "lockstep/torch/sampler.h"
#include "lockstep/torch/state_check.h"
#include "support/scratch.h"

namespace lockstep::torch {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string scratch() {
  return lockstep::testing::scratch_folder(
             "lockstep-ckcheck", ::testing::UnitTest::GetInstance()->current_test_info()->name())
      .string();
}

// A pre-norm block stack of width d and `blocks` blocks (a GPT's shapes).
::torch::nn::Sequential blocks_model(int64_t d, int blocks, uint64_t seed) {
  ::torch::manual_seed(seed);
  ::torch::nn::Sequential model;
  for (int b = 0; b < blocks; ++b) {
    model->push_back(::torch::nn::LayerNorm(::torch::nn::LayerNormOptions({d})));
    model->push_back(::torch::nn::Linear(d, d));
  }
  return model;
}

::torch::nn::Sequential mlp(int64_t hidden, uint64_t seed) {
  ::torch::manual_seed(seed);
  return ::torch::nn::Sequential(::torch::nn::Linear(4, hidden), ::torch::nn::ReLU(),
                                 ::torch::nn::Linear(hidden, 2));
}

std::vector<::torch::Tensor> values(::torch::nn::Module& m) {
  std::vector<::torch::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

void expect_same(const std::vector<::torch::Tensor>& a, const std::vector<::torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].sizes().equals(b[i].sizes()));
    EXPECT_TRUE(a[i].equal(b[i])) << "tensor " << i << " changed";
  }
}

void train_one_step(::torch::nn::Sequential& model, ::torch::optim::Optimizer& opt, int64_t in) {
  opt.zero_grad();
  model->forward(::torch::ones({3, in})).sum().backward();
  opt.step();
}

// Loads `file_model`'s checkpoint into `model`: expects a refusal that says
// `needle`, and the model and optimizer as they were (and still trainable).
void expect_refused_untouched(::torch::nn::Sequential file_model, int64_t file_in,
                              ::torch::nn::Sequential model, int64_t in,
                              const std::string& needle) {
  const std::string path = scratch() + "/ckpt.pt";
  ::torch::optim::Adam file_adam(file_model->parameters(), 0.01);
  train_one_step(file_model, file_adam, file_in);
  save_checkpoint(path, *file_model, file_adam,
                  {.epoch = 3, .step = 9, .sampler = {}, .user = "x"});

  ::torch::optim::Adam adam(model->parameters(), 0.01);
  train_one_step(model, adam, in);  // state to keep
  const auto before = values(*model);
  const auto state_before = adam.state().size();
  TrainingProgress progress{.epoch = 1, .step = 2, .sampler = "s", .user = "u"};
  try {
    load_checkpoint(path, *model, adam, progress);
    ADD_FAILURE() << "a checkpoint of another model was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(needle), HasSubstr(path), HasSubstr("nothing was loaded"),
                                Not(HasSubstr("--checkpoint-dir"))));
  }
  expect_same(values(*model), before);
  EXPECT_EQ(adam.state().size(), state_before);
  EXPECT_EQ(progress.step, 2);
  EXPECT_EQ(progress.user, "u");
  train_one_step(model, adam, in);  // still trains
  for (auto& p : model->parameters()) EXPECT_TRUE(p.isfinite().all().item<bool>());
}

TEST(CheckpointCheck, WiderModelIsRefusedNamingTheFirstTensor) {
  // d=128 into d=96: LibTorch's Module::load took the file's shapes and the
  // job died later in layer_norm.
  expect_refused_untouched(blocks_model(128, 2, 1), 128, blocks_model(96, 2, 2), 96,
                           "'0.weight' is 128 Float in the file but 96 Float in the model");
}

TEST(CheckpointCheck, LinearOfAnotherWidthIsRefused) {
  // 4->8->2 into 4->6->2 returned true and trained on as another model.
  expect_refused_untouched(mlp(8, 1), 4, mlp(6, 2), 4,
                           "'0.weight' is 8x4 Float in the file but 6x4");
}

TEST(CheckpointCheck, ExtraBlocksAreNamed) {
  expect_refused_untouched(blocks_model(16, 3, 1), 16, blocks_model(16, 2, 2), 16,
                           "the file has '4.weight', which the model lacks (4 extra)");
}

TEST(CheckpointCheck, MissingBlocksAreNamed) {
  expect_refused_untouched(blocks_model(16, 2, 1), 16, blocks_model(16, 3, 2), 16,
                           "the file lacks the model's '4.weight' (4 of 12 missing)");
}

TEST(CheckpointCheck, OtherDtypeIsRefused) {
  auto wide = mlp(8, 1);
  wide->to(::torch::kFloat64);
  const std::string path = scratch() + "/f64.pt";
  ::torch::optim::SGD sgd(wide->parameters(), 0.1);
  save_checkpoint(path, *wide, sgd, {});
  auto model = mlp(8, 2);
  ::torch::optim::SGD mine(model->parameters(), 0.1);
  const auto before = values(*model);
  TrainingProgress progress;
  EXPECT_THAT([&] { load_checkpoint(path, *model, mine, progress); },
              ::testing::ThrowsMessage<Error>(HasSubstr("8x4 Double in the file but 8x4 Float")));
  expect_same(values(*model), before);
}

TEST(CheckpointCheck, AnOptimizerOfOtherGroupsIsRefusedAndKeepsItsState) {
  auto model = mlp(8, 1);
  const std::string path = scratch() + "/ckpt.pt";
  ::torch::optim::Adam two_groups(
      std::vector<::torch::optim::OptimizerParamGroup>{
          ::torch::optim::OptimizerParamGroup({model->parameters()[0], model->parameters()[1]}),
          ::torch::optim::OptimizerParamGroup({model->parameters()[2], model->parameters()[3]})},
      ::torch::optim::AdamOptions(0.01));
  save_checkpoint(path, *model, two_groups, {});
  ::torch::optim::Adam one_group(model->parameters(), 0.02);
  train_one_step(model, one_group, 4);
  const auto before = values(*model);
  TrainingProgress progress;
  EXPECT_THAT([&] { load_checkpoint(path, *model, one_group, progress); },
              ::testing::ThrowsMessage<Error>(HasSubstr("does not fit this optimizer")));
  expect_same(values(*model), before);
  EXPECT_EQ(one_group.state().size(), 4u);
  EXPECT_DOUBLE_EQ(one_group.param_groups()[0].options().get_lr(), 0.02);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(CheckpointCheck, FilesOfOtherFormatsAreNamed) {
  const std::string dir = scratch();
  auto model = mlp(8, 1);
  ::torch::optim::SGD sgd(model->parameters(), 0.1);
  TrainingProgress progress;
  auto message = [&](const std::string& path) {
    try {
      load_checkpoint(path, *model, sgd, progress);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // A safetensors header: 8-byte length, then JSON.
  std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string st(8, '\0');
  uint64_t n = header.size();
  std::memcpy(st.data(), &n, 8);
  write_bytes(dir + "/w.safetensors", st + header + std::string(4, '\0'));
  EXPECT_THAT(message(dir + "/w.safetensors"),
              AllOf(HasSubstr("is a safetensors file, not a lockstep checkpoint"),
                    HasSubstr("load_state_dict")));
  // A TorchScript module (what torch.jit.save writes).
  ::torch::jit::Module script("__torch__.Net");
  script.register_parameter("weight", ::torch::ones({2}), false);
  script.save(dir + "/net.pt");
  EXPECT_THAT(message(dir + "/net.pt"),
              AllOf(HasSubstr("TorchScript/LibTorch archive, not a lockstep checkpoint"),
                    Not(HasSubstr("format_version"))));
  write_bytes(dir + "/junk.pt", "not a checkpoint at all");
  EXPECT_THAT(message(dir + "/junk.pt"), HasSubstr("not a file format lockstep knows"));
  EXPECT_EQ(file_kind("PK\x03\x04 archive/data.pkl"), "a PyTorch torch.save file");
}

TEST(CheckpointCheck, CheckStateMatchesAcceptsTheSameModel) {
  auto a = mlp(8, 1), b = mlp(8, 2);
  EXPECT_NO_THROW(check_state_matches(tensor_infos(*a), tensor_infos(*b), "x"));
  auto infos = tensor_infos(*b);
  infos.push_back(infos.front());
  EXPECT_THAT([&] { check_state_matches(tensor_infos(*a), infos, "file f"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("holds '0.weight' twice")));
}

// ---- the sampler's saved state carries its world size (issue 43.3)

std::vector<int64_t> remaining_epoch(DistributedSampler s) {
  std::vector<int64_t> out;
  for (auto b = s.next_batch(5); !b.empty(); b = s.next_batch(5))
    out.insert(out.end(), b.begin(), b.end());
  return out;
}

TEST(SamplerState, LoadAtAnotherSizeResumesTheSameGlobalOrder) {
  const DistributedSamplerOptions base{.dataset_size = 60, .seed = 3};
  // Two ranks each take 3 batches of 5 in epoch 2; rank 0 saves.
  std::vector<DistributedSampler> two;
  for (int r = 0; r < 2; ++r) {
    auto o = base;
    o.rank = r, o.size = 2;
    two.emplace_back(o);
    two.back().set_epoch(2);
    for (int b = 0; b < 3; ++b) two.back().next_batch(5);
  }
  const std::string saved = two[0].save();
  for (int r = 0; r < 3; ++r) {
    auto o = base;
    o.rank = r, o.size = 3;
    DistributedSampler loaded(o), expected(o);
    loaded.load(saved);
    expected.resume(2, 30, r, 3);  // 2 ranks x 3 batches x 5 samples consumed
    EXPECT_EQ(loaded.epoch(), 2);
    EXPECT_EQ(remaining_epoch(loaded), remaining_epoch(expected)) << "rank " << r;
  }
  // At the saved size, load() restores exactly.
  auto o = base;
  o.rank = 1, o.size = 2;
  DistributedSampler same(o);
  same.load(two[1].save());
  EXPECT_EQ(remaining_epoch(same), remaining_epoch(two[1]));
}

TEST(SamplerState, LoadOfAnotherDatasetSizeThrows) {
  DistributedSampler a({.dataset_size = 60, .rank = 0, .size = 2});
  DistributedSampler b({.dataset_size = 50, .rank = 0, .size = 2});
  EXPECT_THAT([&] { b.load(a.save()); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("a dataset of 60 samples")));
}

}  // namespace
}  // namespace lockstep::torch
