// ShardedOptimizer's internals, shared by its step (sharded_optimizer.cc) and
// its checkpoint conversions (sharded_state.cc). Note [ZeRO layout].
#pragma once

#include <torch/torch.h>
#include <torch/csrc/autograd/function.h>

#include <map>
#include <memory>
#include <string>
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
    lockstep::torch::TensorHandle gathering;  // overlapped all-gather not landed yet
  };

  ShardedOptimizer::NamedParameters named;
  std::vector<::torch::Tensor> params;
  std::vector<Bucket> buckets;
  std::vector<std::vector<int>> buckets_of;  // per parameter
  std::vector<Piece> pieces;
  std::vector<std::vector<::torch::Tensor>> full_groups;  // the optimizer's groups before sharding
  std::vector<std::vector<::torch::Tensor>> piece_groups;
  std::vector<int> group_params;  // parameter indices in the optimizer's group order
  std::vector<size_t> group_sizes;
  std::vector<int> passes;
  std::vector<std::pair<std::shared_ptr<::torch::autograd::Node>, uintptr_t>> hooks;
  std::map<const void*, int> index;  // parameter TensorImpl -> position in params
  bool element = true;
  bool overlap = false;         // the resolved gather_overlap
  bool overlap_forced = false;  // kOn (or LOCKSTEP_OVERLAP=on): overlap before any wait is seen
  bool waits_seen = false;      // the loop has called forward()/wait_for()/wait()
  int gathers_pending = 0;
  std::string stale_read;  // first parameter that reached backward with its gather in flight
  int n = 1, me = 0;
  ::torch::ScalarType dtype = ::torch::kFloat32;
  ::torch::Device device = ::torch::kCPU;  // the parameters' (one device for all)

  // Construction, in order (sharded_optimizer.cc): check and index `named`
  // (returns their element counts), lay out the buckets, map the
  // optimizer's groups onto the indices.
  std::vector<int64_t> index_parameters();
  void lay_out(const std::vector<int64_t>& numels, size_t bucket_bytes);
  void map_groups(::torch::optim::Optimizer& optimizer);
  ::torch::Tensor pack_gradients(const Bucket& b, bool release);
  void send(int bucket, const ShardedOptimizerOptions& o, bool release);
  void on_gradient(int param, const ShardedOptimizerOptions& o);
  // sharded_gather.cc
  void start_gathers(const ShardedOptimizerOptions& o, bool overlapped);
  void land(int bucket);
  void land_all();
  bool gathering(int param) const;
  void bind_pieces(::torch::optim::Optimizer& optimizer);
};

// Whether `o` updates each element from that element alone (SGD, Adam,
// AdamW, RMSprop, Adagrad), so its parameters may be split anywhere.
bool is_elementwise(const ::torch::optim::Optimizer& o);

// The resolved gather_overlap (sharded_gather.cc); *forced: on by request,
// not only because it pays.
bool decide_gather_overlap(lockstep::torch::Overlap requested, const Group& group, bool* forced);

}  // namespace lockstep::parallel
