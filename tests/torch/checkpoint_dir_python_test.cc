// A checkpoint directory (lockstep/parallel/checkpoint_dir.h) read by Python:
// two C++ ranks train the main job's CNN data-parallel and save it with
// CheckpointWriter (each rank writes its own model-0000r-of-00002 file);
// /usr/bin/python3's torch then runs docs/interop.md's own snippets
// (checkpoint_dir_python.py): its safetensors reader, written from the
// format's description (no safetensors package, not lockstep's reader),
// reads the index and every shard, a Python FashionCnn loads them with
// load_state_dict(strict=True), and its logits on a fixed input are the ones
// C++ computed, within 1e-6. Skipped, with a message, where python3 cannot
// import torch.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/fashion_cnn.h"
#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/torch/state_dict.h"
#include "torch/helpers.h"
#include "torch/temp_files.h"

namespace lockstep::torch {
namespace {

namespace fs = std::filesystem;
using testing::run_torch_workers;

constexpr int64_t kStep = 1000;  // docs/interop.md's snippet reads ckpt/step-00001000

bool python_has_torch() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

// Both ranks train on the same rows, so their BatchNorm statistics (buffers,
// which no collective averages) agree and every shard holds the model rank 0
// evaluates. Rank 0 writes the input and its logits.
void train_save_and_evaluate(const std::string& dir) {
  ::torch::manual_seed(17);
  examples::FashionCnn model;
  ::torch::optim::Adam adam(model->parameters(), 0.01);
  DistributedOptimizer dist(adam, *model);
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(5);
  for (int s = 0; s < 3; ++s) {  // moves the weights and the running statistics off their init
    auto x = ::torch::randn({8, 1, 28, 28}, g);
    auto y = ::torch::randint(0, 10, {8}, g);
    dist.zero_grad();
    ::torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    dist.step();
  }
  lockstep::parallel::CheckpointWriter writer(dir + "/ckpt");
  writer.save(*model, adam, {.epoch = 0, .step = kStep, .sampler = {}, .user = {}});
  if (rank() != 0) return;
  model->eval();
  ::torch::NoGradGuard no_grad;
  auto input = ::torch::randn({4, 1, 28, 28}, g);
  write_torch_state_dict(dir + "/input.pt", {{"input", input}});
  write_torch_state_dict(dir + "/cpp_logits.pt", {{"logits", model->forward(input)}});
}

::torch::Tensor logits_in(const std::string& path) {
  NamedTensors read = read_torch_state_dict(path);  // a plain dict, as Python saves it
  EXPECT_EQ(read.size(), 1u) << path;
  return read.at(0).second;
}

class CheckpointDirPython : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string file(const std::string& name) const { return dir + "/" + name; }
  std::string dir = testing::fresh_dir("checkpoint-dir-python");
};

TEST_F(CheckpointDirPython, PythonLoadsTheShardsStrictlyAndComputesTheSameLogits) {
  run_torch_workers(2, [&] { train_save_and_evaluate(dir); });
  // A sharded save: the index maps tensors to both ranks' files.
  const std::string step = file(fmt::format("ckpt/step-{:08d}", kStep));
  std::ifstream index_file(step + "/model.safetensors.index.json");
  ASSERT_TRUE(index_file) << "no index in " << step;
  const nlohmann::json index = nlohmann::json::parse(index_file);
  std::set<std::string> files;
  for (const auto& [name, shard] : index.at("weight_map").items())
    files.insert(shard.get<std::string>());
  EXPECT_EQ(files, (std::set<std::string>{"model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors"}));

  const std::string command =
      fmt::format("/usr/bin/python3 '{}' '{}' '{}' '{}' '{}'", LOCKSTEP_CHECKPOINT_DIR_PY,
                  LOCKSTEP_INTEROP_MD, dir, file("input.pt"), file("py_logits.pt"));
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  auto cpp = logits_in(file("cpp_logits.pt")), py = logits_in(file("py_logits.pt"));
  ASSERT_EQ(py.sizes(), cpp.sizes());
  EXPECT_LE((py - cpp).abs().max().item<double>(), 1e-6);
  EXPECT_GT(cpp.abs().max().item<double>(), 1e-3) << "the logits are not all zero";
}

}  // namespace
}  // namespace lockstep::torch
