// `lockstep convert checkpoint`: a lockstep checkpoint to safetensors and
// torch.save and back, --list, and damaged or foreign inputs refused with
// exit status 1 or 2 (never a signal). The reference is the model itself.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lockstep/torch/checkpoint.h"
#include "lockstep/torch/state_dict.h"

namespace lockstep::torch {
namespace {

namespace fs = std::filesystem;

struct Result {
  int status = -1;  // the exit status; -1 when a signal ended it
  std::string output;
};

Result convert(const std::string& args) {
  const char* dir = std::getenv("LOCKSTEP_BIN_DIR");
  std::string command =
      std::string(dir ? dir : ".") + "/lockstep convert checkpoint " + args + " 2>&1";
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) r.output.append(buf, n);
  int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

struct Net : ::torch::nn::Module {
  Net() {
    fc = register_module("fc", ::torch::nn::Linear(4, 3));
    bn = register_module("bn", ::torch::nn::BatchNorm1d(3));
  }
  ::torch::nn::Linear fc{nullptr};
  ::torch::nn::BatchNorm1d bn{nullptr};
};

class ConvertCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir);
    ::torch::manual_seed(8);
    ::torch::NoGradGuard no_grad;
    net.bn->running_mean.uniform_(-1, 1);
    ::torch::optim::SGD sgd(net.parameters(), 0.1);
    save_checkpoint(file("ckpt.pt"), net, sgd, {.epoch = 1, .step = 5, .sampler = {}, .user = {}});
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string file(const std::string& name) const { return (fs::path(dir) / name).string(); }
  void expect_weights_of_net(const std::string& path) const {
    NamedTensors read = read_weights(path);
    NamedTensors want = state_dict(net);
    ASSERT_EQ(read.size(), want.size()) << path;
    std::map<std::string, ::torch::Tensor> by_name(read.begin(), read.end());
    for (const auto& [name, t] : want) {
      ASSERT_TRUE(by_name.count(name)) << name << " missing from " << path;
      EXPECT_TRUE(::torch::equal(by_name[name], t)) << name << " in " << path;
    }
  }
  std::string dir =
      (fs::temp_directory_path() / ("lockstep-convert-ckpt-" + std::to_string(getpid()))).string();
  Net net;
};

TEST_F(ConvertCheckpoint, CheckpointToSafetensorsToTorchSaveKeepsEveryWeight) {
  Result a = convert(file("ckpt.pt") + " " + file("w.safetensors"));
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("lockstep checkpoint"), std::string::npos) << a.output;
  expect_weights_of_net(file("w.safetensors"));
  Result b = convert(file("w.safetensors") + " " + file("w.pth"));
  ASSERT_EQ(b.status, 0) << b.output;
  expect_weights_of_net(file("w.pth"));
  Result c = convert(file("w.pth") + " " + file("back.safetensors"));
  ASSERT_EQ(c.status, 0) << c.output;
  expect_weights_of_net(file("back.safetensors"));
}

TEST_F(ConvertCheckpoint, ListNamesEveryTensorWithDtypeAndShape) {
  Result r = convert(file("ckpt.pt") + " --list");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* line : {"fc.weight", "Float", "3x4", "bn.running_mean", "bn.num_batches_tracked",
                           "Long", "7 tensors"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << " not in\n" << r.output;
}

TEST_F(ConvertCheckpoint, DamagedAndForeignInputsExitWithAStatusNamingTheFile) {
  const std::string bytes = [&] {
    std::ifstream in(file("ckpt.pt"), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  std::ofstream(file("half.pt"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  std::ofstream(file("garbage.pt"), std::ios::binary) << "garbage, not a model";
  std::string flipped = bytes;
  for (size_t k = 64; k < flipped.size(); k += 97) flipped[k] = static_cast<char>(~flipped[k]);
  std::ofstream(file("flipped.pt"), std::ios::binary) << flipped;
  for (const char* name : {"half.pt", "garbage.pt", "flipped.pt"}) {
    Result r = convert(file(name) + " " + file("out.safetensors"));
    EXPECT_TRUE(r.status == 1 || r.status == 2) << name << " exit " << r.status << "\n" << r.output;
    EXPECT_NE(r.output.find(name), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(file("out.safetensors")));
  }
  Result bad_out = convert(file("ckpt.pt") + " " + file("out.txt"));
  EXPECT_EQ(bad_out.status, 2) << bad_out.output;
  EXPECT_NE(bad_out.output.find(".safetensors or .pt/.pth/.bin"), std::string::npos)
      << bad_out.output;
}

}  // namespace
}  // namespace lockstep::torch
