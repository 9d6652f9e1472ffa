// ShardedOptimizer's internals, shared by its step (sharded_optimizer.cc) and
// its checkpoint conversions (sharded_state.cc). Note [ZeRO layout].
#pragma once

#include <torch/torch.h>
#include <torch/csrc/autograd/function.h>

#include <memory>
#include <utility>
#include <vector>

#include "lockstep/parallel/sharded_optimizer.h"
#include "lockstep/torch/collectives.h"
#include "parallel/shard_layout.h"

namespace lockstep::parallel {

struct ShardedOptimizer::Impl {
  struct Piece {
    int bucket = 0;
    ShardPlacement place;
    int64_t shard_offset = 0;  // within this rank's segment
    ::torch::Tensor tensor;    // view of the model parameter
  };
  struct Bucket {
    ShardBucket layout;
    ::torch::Tensor grad_shard;  // reduced, averaged gradient of this rank's segment
    lockstep::torch::TensorHandle in_flight;
    int ready = 0;  // parameters whose gradient is complete this step
    bool sent = false;
  };

  ShardedOptimizer::NamedParameters named;
  std::vector<::torch::Tensor> params;
  std::vector<Bucket> buckets;
  std::vector<std::vector<int>> buckets_of;  // per parameter
  std::vector<Piece> pieces;
  std::vector<std::vector<::torch::Tensor>> full_groups;  // the optimizer's groups before sharding
  std::vector<std::vector<::torch::Tensor>> piece_groups;
  std::vector<int> group_params;      // parameter indices in the optimizer's group order
  std::vector<size_t> group_sizes;
  std::vector<int> passes;
  std::vector<std::pair<std::shared_ptr<::torch::autograd::Node>, uintptr_t>> hooks;
  bool element = true;
  int n = 1, me = 0;
  ::torch::ScalarType dtype = ::torch::kFloat32;

  ::torch::Tensor pack_gradients(const Bucket& b, bool release);
  void send(int bucket, const ShardedOptimizerOptions& o, bool release);
  void on_gradient(int param, const ShardedOptimizerOptions& o);
  void gather_parameters(const ShardedOptimizerOptions& o);
  void bind_pieces(::torch::optim::Optimizer& optimizer);
};

}  // namespace lockstep::parallel
