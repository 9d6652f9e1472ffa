// What the documentation's snippets take from the program around them (a
// model, a batch, the number of epochs), one namespace per Markdown file,
// declared so each snippet compiles as written (extract_snippets.py). Only
// torch and std here: a snippet that includes headers must include every
// lockstep header it uses. Compiled, never linked: `extern` is enough.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace docs_context {

// A model with one parameter and the identity forward.
struct ToyModelImpl : torch::nn::Module {
  ToyModelImpl() { register_parameter("w", torch::zeros({1})); }
  torch::Tensor forward(torch::Tensor x) { return x; }
};
TORCH_MODULE(ToyModel);

struct Batch {
  torch::Tensor data, target;
};

namespace readme_md {
using MyModel = ToyModel;
inline int64_t n = 0;
inline int epochs = 1;
template <class Sampler>
std::vector<Batch> my_batches(Sampler& sampler);
torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target);
}  // namespace readme_md

namespace data_md {
struct World {
  int rank() const { return 0; }
  int size() const { return 1; }
};
inline World world;
inline int epochs = 1;
void train_step(const torch::Tensor& data, const torch::Tensor& target);
}  // namespace data_md

namespace engine_md {
inline float grad[10 * 128];
}  // namespace engine_md

namespace torch_md {
using FashionCnn = ToyModel;
inline int64_t n = 0;
inline int epochs = 1;
template <class Model, class Indices>
torch::Tensor loss(Model& model, const Indices& batch);
void train();
void save_checkpoint_locally();
}  // namespace torch_md

namespace report_md {}     // namespace report_md
namespace extending_md {}  // namespace extending_md

}  // namespace docs_context
