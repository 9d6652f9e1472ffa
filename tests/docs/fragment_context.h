// Context for the snippets that are fragments of a program (no #include of
// their own): every public header, then the names each file's fragments take
// from around them (program_context.h has the rest).
#pragma once

#include "lockstep/data/torch.h"
#include "lockstep/engine/engine.h"
#include "lockstep/parallel/parallel.h"
#include "lockstep/rendezvous/store.h"
#include "lockstep/torch/compression.h"
#include "lockstep/torch/same_bits.h"
#include "lockstep/torch/torch.h"
#include "program_context.h"

namespace docs_context {

namespace lt = lockstep::torch;
namespace lp = lockstep::parallel;

namespace data_md {
using namespace lockstep::data;
extern DecodeOptions decode;
inline uint64_t seed = 0;
inline size_t size = 0;
}  // namespace data_md

namespace elastic_state_md {
ToyModel make_model();
inline int64_t n = 0;
inline int epochs = 1;
torch::Tensor loss(ToyModel& model, const std::vector<int64_t>& batch);
extern torch::optim::Adam adam;
extern lt::ElasticState state;
}  // namespace elastic_state_md

namespace mixed_precision_md {
extern std::string flag;
extern ToyModel model;
extern torch::optim::Adam adam;
extern std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
}  // namespace mixed_precision_md

namespace parallelism_md {
extern lp::Mesh mesh;
extern torch::nn::Sequential model;
extern torch::optim::Adam adam;
extern torch::Tensor x, y, loss;
torch::Tensor loss_fn(const torch::Tensor& output, const torch::Tensor& target);
// Activation checkpointing's pieces.
torch::nn::Sequential make_model();
extern torch::nn::Linear fc1, fc2;
extern torch::nn::ReLU relu;
extern torch::nn::Dropout dropout;
torch::Tensor f(const torch::Tensor& x);
extern std::vector<torch::Tensor> params;
// The GPT recipe's pieces.
extern lp::FullyShardedModel fsdp;
inline int k = 2;
extern ToyModel gpt;
extern std::vector<torch::Tensor> ids, targets;
}  // namespace parallelism_md

namespace same_bits_md {
extern ToyModel model;
extern torch::optim::Adam optimizer;
inline int steps = 1;
std::pair<torch::Tensor, torch::Tensor> samples_of(int64_t step, int64_t index);
}  // namespace same_bits_md

namespace rendezvous_md {
extern std::string my_address;
}  // namespace rendezvous_md

namespace torch_md {
extern ToyModel model;
extern lt::DistributedOptimizer opt;
extern torch::Tensor images, labels;
inline size_t dataset_size = 0;
extern torch::Tensor grad;
// The GAN loop's pieces.
extern ToyModel d, g;
extern torch::optim::Adam d_adam, g_adam;
inline uint64_t seed = 0;
inline int steps = 1;
inline int64_t batch = 8, noise_dim = 2;
torch::Tensor real_batch();
torch::Tensor bce(const torch::Tensor& logits, int label);
struct MyDataset : torch::data::datasets::Dataset<MyDataset> {
  torch::data::Example<> get(size_t index) override;
  c10::optional<size_t> size() const override;
};
}  // namespace torch_md

}  // namespace docs_context
