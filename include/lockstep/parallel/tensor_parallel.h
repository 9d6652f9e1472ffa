// Tensor (intra-layer model) parallelism, Megatron-LM style (Shoeybi et al.,
// arXiv 1909.08053): each rank of a tensor group holds a slice of every
// parallel layer's weight matrix, and activations are exchanged instead.
//
//   ColumnParallelLinear: y = x W^T + b with W's rows (output features) split;
//     each rank computes its slice of y (optionally gathered to the full y).
//   RowParallelLinear: W's columns (input features) split; each rank
//     multiplies its slice of x and the partial products are all-reduced.
//   ParallelMLP: Column (no gather) -> activation -> Row: one all-reduce in
//     forward and one in backward for the whole block.
//
// The regions they rest on (autograd functions; Note [Tensor regions] in
// src/parallel/tensor_regions.cc):
//   copy_to_group      forward identity          backward all-reduce (sum)
//   reduce_from_group  forward all-reduce (sum)  backward identity
//   gather_from_group  forward all-gather of the last dim   backward own slice
//   scatter_to_group   forward own slice of the last dim    backward all-gather
//
// Initialisation: a parallel layer draws the full matrix exactly as the dense
// torch::nn::Linear(in, out) would (same generator, same order: weight then
// bias) and keeps its slice, so with the same seed on every rank a
// tensor-parallel model computes what the dense model computes. Slices are
// contiguous and uneven sizes are allowed: rank r of n gets
// size/n + (r < size%n) features.
//
// Every rank of the group must run forward and backward of the same layers in
// the same order (the collectives are named per layer instance, from a
// per-process counter or the `name` option). Not thread-safe per instance.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "lockstep/torch/group.h"
#include "lockstep/torch/state_layout.h"

namespace lockstep::parallel {

using Group = lockstep::torch::Group;

::torch::Tensor copy_to_group(const ::torch::Tensor& x, const Group& group,
                              const std::string& name);
::torch::Tensor reduce_from_group(const ::torch::Tensor& x, const Group& group,
                                  const std::string& name);
::torch::Tensor gather_from_group(const ::torch::Tensor& x, const Group& group,
                                  const std::string& name);
::torch::Tensor scatter_to_group(const ::torch::Tensor& x, const Group& group,
                                 const std::string& name);

// [begin, begin + length) of `size` features held by group rank `rank` of `n`.
std::pair<int64_t, int64_t> shard_range(int64_t size, int rank, int n);

// A parameter stored as a slice of a larger (full) tensor along `dim`.
struct ShardSpec {
  std::string name;  // the parameter's name in its module
  int64_t dim = 0;
  int64_t full_size = 0;
  Group group;
};

// Implemented by modules whose parameters are shards; full_state_dict()
// and load_full_state_dict() use it to save and load unsharded tensors, and
// lockstep::torch's one-rank checkpoint calls refuse such a model by name
// (PartialState, lockstep/torch/state_layout.h).
class ShardedModule : public lockstep::torch::PartialState {
 public:
  virtual std::vector<ShardSpec> shard_specs() const = 0;
  std::string whole_state_call() const override {
    return "lockstep::parallel::save_checkpoint/load_checkpoint(path, model, optimizer, "
           "progress), or CheckpointWriter::save(model, ...)/load_checkpoint_dir(root, model, ...)";
  }
};

struct ColumnParallelLinearOptions {
  ColumnParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features(in_features), out_features(out_features) {}
  int64_t in_features;
  int64_t out_features;
  bool bias = true;
  bool gather_output = false;  // false: the output's last dim stays split
  Group group{};               // the tensor group (default: every rank)
  std::string name;            // collective names; empty: "tp<counter>"
};

class ColumnParallelLinearImpl : public ::torch::nn::Cloneable<ColumnParallelLinearImpl>,
                                 public ShardedModule {
 public:
  explicit ColumnParallelLinearImpl(ColumnParallelLinearOptions options);
  void reset() override;
  ::torch::Tensor forward(const ::torch::Tensor& x);
  std::vector<ShardSpec> shard_specs() const override;

  ColumnParallelLinearOptions options;
  ::torch::Tensor weight;  // [out_local, in]
  ::torch::Tensor bias;    // [out_local] (undefined without bias)
  int64_t out_begin = 0, out_local = 0;

 private:
  std::string name_;
};

struct RowParallelLinearOptions {
  RowParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features(in_features), out_features(out_features) {}
  int64_t in_features;
  int64_t out_features;
  bool bias = true;
  bool input_is_parallel = true;  // false: the full input is split here first
  Group group{};
  std::string name;
};

class RowParallelLinearImpl : public ::torch::nn::Cloneable<RowParallelLinearImpl>,
                              public ShardedModule {
 public:
  explicit RowParallelLinearImpl(RowParallelLinearOptions options);
  void reset() override;
  ::torch::Tensor forward(const ::torch::Tensor& x);
  std::vector<ShardSpec> shard_specs() const override;

  RowParallelLinearOptions options;
  ::torch::Tensor weight;  // [out, in_local]
  ::torch::Tensor bias;    // [out], whole on every rank (added after the reduction)
  int64_t in_begin = 0, in_local = 0;

 private:
  std::string name_;
};

struct ParallelMLPOptions {
  ParallelMLPOptions(int64_t in_features, int64_t hidden_features, int64_t out_features)
      : in_features(in_features), hidden_features(hidden_features), out_features(out_features) {}
  int64_t in_features, hidden_features, out_features;
  bool bias = true;
  Group group{};
  std::string name;
  // Applied elementwise to the hidden layer (default: ReLU).
  std::function<::torch::Tensor(const ::torch::Tensor&)> activation;
};

// fc1 (ColumnParallelLinear in -> hidden) -> activation -> fc2
// (RowParallelLinear hidden -> out): the dense Sequential(Linear, act, Linear).
class ParallelMLPImpl : public ::torch::nn::Cloneable<ParallelMLPImpl> {
 public:
  explicit ParallelMLPImpl(ParallelMLPOptions options);
  void reset() override;
  ::torch::Tensor forward(const ::torch::Tensor& x);

  ParallelMLPOptions options;
  ::torch::nn::ModuleHolder<ColumnParallelLinearImpl> fc1{nullptr};
  ::torch::nn::ModuleHolder<RowParallelLinearImpl> fc2{nullptr};
};

// TORCH_MODULE spelled out (the macro names torch::nn relative to this namespace).
class ColumnParallelLinear : public ::torch::nn::ModuleHolder<ColumnParallelLinearImpl> {
 public:
  using ::torch::nn::ModuleHolder<ColumnParallelLinearImpl>::ModuleHolder;
  using Impl = ColumnParallelLinearImpl;
};
class RowParallelLinear : public ::torch::nn::ModuleHolder<RowParallelLinearImpl> {
 public:
  using ::torch::nn::ModuleHolder<RowParallelLinearImpl>::ModuleHolder;
  using Impl = RowParallelLinearImpl;
};
class ParallelMLP : public ::torch::nn::ModuleHolder<ParallelMLPImpl> {
 public:
  using ::torch::nn::ModuleHolder<ParallelMLPImpl>::ModuleHolder;
  using Impl = ParallelMLPImpl;
};

// Every parameter and buffer of `module` by its dotted name, sharded ones
// gathered to their full size. Collective over each sharded module's group.
std::vector<std::pair<std::string, ::torch::Tensor>> full_state_dict(::torch::nn::Module& module);
// Loads such a dictionary (from full_state_dict on any layout, or a dense
// model's named parameters and buffers): sharded parameters take their
// slice. Throws lockstep::Error naming a missing name or a shape mismatch.
void load_full_state_dict(::torch::nn::Module& module,
                          const std::vector<std::pair<std::string, ::torch::Tensor>>& state);

}  // namespace lockstep::parallel
