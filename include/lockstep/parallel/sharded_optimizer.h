// ShardedOptimizer: ZeRO stages 1 and 2 (Rajbhandari et al., SC'20) over any
// torch::optim::Optimizer. Each rank of the group keeps optimizer state for
// only 1/N of the parameters:
//
//   stage 1: after backward, each bucket of gradients is reduce-scattered
//            (averaged); each rank steps its shard; the updated shards are
//            all-gathered back into every rank's parameters.
//   stage 2: as stage 1, but a bucket is reduce-scattered from backward's
//            hooks as soon as its last gradient is ready, and the full
//            gradients are released: a rank holds gradients for one bucket in
//            flight plus its own shard.
//
// Communication per step: reduce-scatter + all-gather of the padded
// parameter bytes, the same 2(N-1)/N·M per rank as DistributedOptimizer's
// allreduce. Memory per rank: optimizer state ≈ 1/N (+ at most one bucket's
// imbalance).
//
// Granularity (Note [ZeRO layout] in sharded_optimizer.cc): elementwise
// optimizers (SGD, Adam, AdamW, RMSprop, Adagrad) are sharded by element, so
// one large tensor is split evenly; any other optimizer (LAMB, LARS,
// NovoGrad... whose step needs norms of whole tensors) is sharded by whole
// tensors, each rank stepping complete parameters, which is exact for every
// optimizer. kAuto chooses by the optimizer's type; LBFGS is refused.
//
//   torch::optim::Adam adam(model->parameters(), 1e-3);
//   lockstep::parallel::ShardedOptimizer zero(adam, *model, {.stage = 2});
//   zero.zero_grad(); loss.backward(); zero.step();
//
// Overlapping the parameter all-gather with the next forward
// (options.gather_overlap; Note [ZeRO gather overlap] in sharded_gather.cc):
// step() then returns with each bucket's all-gather in flight, in forward
// order, and the parameters other ranks own land only when waited for. Run
// the forward through zero.forward(sequential, x), which waits for each
// layer's buckets just before that layer runs, or call
// zero.wait_for(module) before a module runs, or zero.wait() for all.
// step(), checkpoints and the destructor wait for what is still in flight.
// A parameter that reaches backward while its all-gather was never waited
// for (the forward read stale values) fails the next step() with an error
// naming it; debug and sanitizer builds also fill the values in flight
// with NaN so that any such read shows. kAuto follows LOCKSTEP_OVERLAP and,
// like DistributedOptimizer, overlaps only where it pays (across hosts or
// with a spare core, see overlap_pays in lockstep/torch/placement.h), and
// only once the training loop has called forward()/wait_for()/wait(), so a
// loop that calls model->forward(x) directly keeps the synchronous
// all-gather; kOn forces it (the loop must then wait).
//
// Wrap the optimizer before its first step (its state must be empty); resume
// with lockstep::parallel::load_checkpoint, which accepts checkpoints written
// by any world size and layout. Every rank of the group must wrap the same
// parameters in the same order. Not thread-safe: drive it from the training
// thread.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/torch/distributed_optimizer.h"
#include "lockstep/torch/group.h"

namespace lockstep::parallel {

namespace detail::ckdir {
struct Access;  // checkpoint directories read and write the shards in place
}  // namespace detail::ckdir

using Group = lockstep::torch::Group;

enum class ShardGranularity { kAuto, kElement, kTensor };

struct ShardedOptimizerOptions {
  int stage = 1;                   // 1 or 2
  size_t bucket_bytes = 4u << 20;  // gradient bytes per reduce-scatter
  ShardGranularity granularity = ShardGranularity::kAuto;
  int backward_passes_per_step = 1;  // gradients summed over this many backward passes
  // Gradient compression (FullyShardedOptions::reduce_dtype's): each rank's
  // gradient divided by N and cast to this floating dtype (kBFloat16,
  // kHalf), summed by the reduce-scatter, the shard cast back. Unset: the
  // parameters' dtype. PowerSGD and 1-bit have no sharded form.
  std::optional<::torch::ScalarType> reduce_dtype = std::nullopt;
  // Leave step()'s parameter all-gathers in flight for the next forward
  // (kAuto: LOCKSTEP_OVERLAP, then where it pays; see above).
  lockstep::torch::Overlap gather_overlap = lockstep::torch::Overlap::kAuto;
  Group group{};              // the data-parallel group (default: every rank)
  std::string name = "zero";  // collective-name prefix
};

class ShardedOptimizer {
 public:
  using NamedParameters = std::vector<std::pair<std::string, ::torch::Tensor>>;

  // `optimizer` must outlive this object and update exactly the parameters of
  // `named` (which must all be one floating dtype). Its parameter groups are
  // rewritten to this rank's shard.
  ShardedOptimizer(::torch::optim::Optimizer& optimizer, NamedParameters named,
                   ShardedOptimizerOptions options = {});
  ShardedOptimizer(::torch::optim::Optimizer& optimizer, const ::torch::nn::Module& module,
                   ShardedOptimizerOptions options = {});
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;
  // Restores the optimizer's parameter groups to the full parameters.
  ~ShardedOptimizer();

  void zero_grad();
  // Reduce-scatter (what stage 2 has not sent yet), step the shard,
  // all-gather the parameters.
  void step();

  // The overlapped all-gather's waits (no-ops when nothing is in flight):
  // the buckets holding any parameter of `module` (recursively) land.
  void wait_for(const ::torch::nn::Module& module);
  // Every bucket lands.
  void wait();
  // net's layers in order, each after wait_for(layer): the forward that
  // lets the all-gathers of later layers run behind the earlier layers.
  ::torch::Tensor forward(::torch::nn::Sequential& net, ::torch::Tensor x);
  // Whether the all-gathers may be left in flight (the resolved option).
  bool overlaps_gather() const;
  // Buckets whose all-gather has not landed yet.
  int gathers_in_flight() const;

  ::torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const ShardedOptimizerOptions& options() const { return options_; }
  bool element_granularity() const;
  // Optimizer-state bytes on this rank.
  int64_t state_bytes() const;
  // Elements of the parameters this rank steps (its shard, padding excluded).
  int64_t shard_elements() const;
  // Gradient bytes this rank holds after backward (stage 2: its shards only).
  int64_t gradient_bytes() const;
  // Largest bucket, in bytes of the parameter dtype.
  int64_t max_bucket_bytes() const;

  // For checkpoints (lockstep/parallel/checkpoint.h). FullState holds one
  // entry per wrapped parameter (null: no state yet).
  using FullState = std::vector<std::unique_ptr<::torch::optim::OptimizerParamState>>;
  // Every parameter's whole state assembled from all ranks' shards
  // (collective over the group; complete on every rank that holds some state).
  FullState gather_full_state();
  // Takes this rank's slices of a whole state (no communication).
  void scatter_full_state(const FullState& full);
  // Runs `body` while the optimizer's groups hold the full parameters and its
  // state is `full` (to save or load a whole-model optimizer archive), then
  // restores the shard view and returns the full state `body` left.
  FullState with_full_view(FullState full, const std::function<void()>& body);
  // Re-attaches the shard to the parameters' storage after something replaced
  // it (Module::load does); the shard's optimizer state is dropped.
  void rebind();
  const NamedParameters& parameters() const;

  struct Impl;

 private:
  friend struct detail::ckdir::Access;
  void on_gradient_ready(int param);

  ::torch::optim::Optimizer* optimizer_;
  ShardedOptimizerOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::parallel
