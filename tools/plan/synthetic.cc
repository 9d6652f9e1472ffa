// lockstep-plan-synthetic: a training loop over a synthetic model, for
// validating the planner where the main job's gradients are too small to
// stress the network. Its parameters have ResNet-50's 161 shapes (97.5 MiB,
// tools/bench_engine/resnet50.cc) or a tiny set for CI; each step runs a
// small MLP for compute plus one multiply per parameter, so every
// gradient flows through DistributedOptimizer's hooks in backward order.
//
//   lockstep run -np 2 lockstep-plan-synthetic --model resnet50 --steps 40
#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include "lockstep/torch/torch.h"
#include "tools/bench_engine/resnet50.h"

namespace lt = lockstep::torch;

namespace {

struct Flags {
  std::string model = "resnet50";
  int64_t steps = 40;
  int64_t batch = 32;
  int64_t width = 256;  // MLP width: compute per step
  int64_t depth = 4;
};

std::vector<std::pair<std::string, std::vector<int64_t>>> shapes(const std::string& model) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  if (model == "resnet50") {
    for (const auto& p : lockstep::bench::resnet50_parameters()) out.push_back({p.name, p.shape});
  } else if (model == "tiny") {
    out = {{"a", {256}}, {"b", {64, 64}}, {"c", {16, 1024}}, {"d", {10}}};
  } else {
    throw std::invalid_argument("--model must be resnet50 or tiny");
  }
  return out;
}

struct SyntheticImpl : torch::nn::Module {
  SyntheticImpl(const Flags& f) {
    for (int64_t i = 0; i < f.depth; ++i)
      mlp.push_back(register_module(fmt::format("mlp{}", i), torch::nn::Linear(f.width, f.width)));
    for (auto& [name, shape] : shapes(f.model)) {
      std::string key = name;
      std::replace(key.begin(), key.end(), '.', '_');
      params.push_back(register_parameter(key, torch::randn(shape) * 0.01));
      probes.push_back(torch::randn(shape));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& l : mlp) x = torch::tanh(l->forward(x));
    torch::Tensor loss = x.pow(2).mean();
    for (size_t i = 0; i < params.size(); ++i) loss = loss + (params[i] * probes[i]).mean();
    return loss;
  }
  std::vector<torch::nn::Linear> mlp;
  std::vector<torch::Tensor> params, probes;
};
TORCH_MODULE(Synthetic);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Synthetic training loop for `lockstep plan validate` (docs/plan.md)"};
  Flags f;
  app.add_option("--model", f.model, "resnet50 | tiny")->capture_default_str();
  app.add_option("--steps", f.steps, "optimizer steps")->capture_default_str();
  app.add_option("--batch", f.batch, "samples per step and rank")->capture_default_str();
  app.add_option("--width", f.width, "MLP width (compute per step)")->capture_default_str();
  app.add_option("--depth", f.depth, "MLP layers")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    lt::init();
    torch::manual_seed(1);
    Synthetic model(f);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(1e-3));
    lt::DistributedOptimizer opt(sgd, *model);
    lt::broadcast_parameters(*model, 0);
    torch::Tensor x = torch::randn({f.batch, f.width});
    for (int64_t step = 0; step < f.steps; ++step) {
      lt::profile_samples(f.batch);  // no DistributedSampler here
      opt.zero_grad();
      model->forward(x).backward();
      opt.step();
    }
    if (lt::rank() == 0) fmt::print(stderr, "lockstep-plan-synthetic: {} steps done\n", f.steps);
    lt::shutdown();
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-plan-synthetic: error: {}\n", e.what());
    return 1;
  }
}
