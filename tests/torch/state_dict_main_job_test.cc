// The main job's --export and --init-from (docs/main-job.md): its exported
// weights give Python the logits lockstep computes, and a job started from a
// file starts from exactly that file. A few steps each; skipped without the
// Fashion-MNIST package (and, for Python, without /usr/bin/python3's torch).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/fashion_cnn.h"
#include "lockstep/torch/state_dict.h"
#include "temp_files.h"

namespace lockstep::torch {
namespace {

namespace fs = std::filesystem;

const char* kShort = "--train-subset 640 --test-subset 128 --epochs 1 --batch-size 64";
// The widths of FashionCnnOptions{} and of the Python model (the default recipe is wider).
const char* kWidths = "--channels1 16 --channels2 32";

bool have_dataset() {
  return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

// The job's exit status (-1 for a signal); its stderr goes to `log`.
int main_job(const std::string& args, const std::string& log, const char* widths = kWidths) {
  const char* dir = std::getenv("LOCKSTEP_BIN_DIR");
  const std::string command = fmt::format("'{}/lockstep-fashion-mnist' {} {} {} 2>'{}' >/dev/null",
                                          dir ? dir : ".", kShort, widths, args, log);
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

double max_parameter_difference(const std::string& a, const std::string& b) {
  examples::FashionCnn x, y;
  load_state_dict(a, *x);
  load_state_dict(b, *y);
  double most = 0;
  auto px = x->parameters(), py = y->parameters();
  for (size_t k = 0; k < px.size(); ++k)
    most = std::max(most, (px[k] - py[k]).abs().max().item<double>());
  return most;
}

class MainJobWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_dataset()) GTEST_SKIP() << "install dataset-fashion-mnist";
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string file(const std::string& name) const { return dir + "/" + name; }
  std::string dir = testing::fresh_dir("main-job-weights");
};

TEST_F(MainJobWeights, ExportLoadsInPythonWithTheSameLogits) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  ASSERT_EQ(main_job("--max-steps 5 --export " + file("job.pt"), file("log")), 0)
      << text_of(file("log"));
  ::torch::manual_seed(31);
  auto input = ::torch::randn({4, 1, 28, 28});
  write_torch_state_dict(file("input.pt"), {{"input", input}});
  const std::string command =
      fmt::format("/usr/bin/python3 {} forward {} {} {}", LOCKSTEP_STATE_DICT_PY, file("job.pt"),
                  file("input.pt"), file("py_logits.pt"));
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  examples::FashionCnn model;
  load_state_dict(file("job.pt"), *model);
  model->eval();
  ::torch::NoGradGuard no_grad;
  ::torch::set_num_threads(1);
  auto python_logits = read_torch_state_dict(file("py_logits.pt")).at(0).second;
  EXPECT_LE((python_logits - model->forward(input)).abs().max().item<double>(), 1e-6);
}

TEST_F(MainJobWeights, InitFromStartsFromTheFileAndChecksIt) {
  ASSERT_EQ(main_job("--seed 1 --max-steps 5 --export " + file("a.safetensors"), file("log")), 0)
      << text_of(file("log"));
  // One step at a negligible learning rate: the weights stay those it started from.
  const char* still = "--seed 2 --max-steps 1 --lr 1e-9";
  ASSERT_EQ(main_job(fmt::format("{} --init-from {} --export {}", still, file("a.safetensors"),
                                 file("b.pt")),
                     file("log")),
            0)
      << text_of(file("log"));
  ASSERT_EQ(main_job(fmt::format("{} --export {}", still, file("c.pt")), file("log")), 0)
      << text_of(file("log"));
  EXPECT_LE(max_parameter_difference(file("a.safetensors"), file("b.pt")), 1e-6);
  EXPECT_GE(max_parameter_difference(file("a.safetensors"), file("c.pt")),
            1e-3);  // seed 2's own init

  EXPECT_EQ(main_job("--init-from " + file("a.safetensors"), file("log"), "--channels1 8"), 1);
  EXPECT_NE(text_of(file("log")).find("does not match the model"), std::string::npos)
      << text_of(file("log"));
}

// Refused while parsing the flags, not after training (exit status 2).
TEST_F(MainJobWeights, ExportToAnUnknownExtensionIsRefusedAtStart) {
  EXPECT_EQ(main_job("--export " + file("weights.txt"), file("log")), 2);
  EXPECT_NE(text_of(file("log")).find(".safetensors or .pt/.pth/.bin"), std::string::npos)
      << text_of(file("log"));
}

}  // namespace
}  // namespace lockstep::torch
