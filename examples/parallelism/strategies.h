// One training step, prediction and per-rank bookkeeping for each strategy of
// lockstep-parallelism (docs/parallelism.md). A Strategy owns its model,
// optimizer and wrapper; main.cc runs the same loop over any of them.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/parallel/parallel.h"

namespace lockstep::examples {

struct StrategyFlags {
  std::string strategy = "data";  // data|tensor|pipeline|zero|fsdp|ps
  std::string mesh;               // e.g. data=2,tensor=2 (tensor/pipeline)
  int micro_batches = 4;
  std::string schedule = "1f1b";
  std::vector<int> partition;  // pipeline: layers per stage (empty: by parameter count)
  int zero_stage = 2;
  int fsdp_unit = 2;  // fsdp: consecutive layers per flat-parameter unit
  int servers = 0;    // ps: colocated servers (0: every worker)
  double lr = 1e-3;
  int64_t batch_size = 64;  // per data-parallel replica
  // data: none|fp16|bf16|powersgd:R|onebit|onebit-adam|onebit-lamb
  std::string compression = "none";
  int checkpoint_activations = 0;  // layers per checkpointed segment (0: off; not tensor)
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // This rank's part of one step on its replica's batch; returns the batch's
  // mean loss where this rank knows it (nullopt: pipeline stages but the last).
  virtual std::optional<double> train_step(const ::torch::Tensor& x, const ::torch::Tensor& y) = 0;
  // Logits of x on ranks whose predictions count (one per data replica).
  virtual std::optional<::torch::Tensor> predict(const ::torch::Tensor& x) = 0;
  virtual void finish() {}
  // Completes what the last step left in flight (ZeRO's overlapped
  // all-gather), so the clock and the traffic counters include it.
  virtual void settle() {}

  // Which data shard this rank reads, of how many.
  int data_rank = 0, data_size = 1;
  // zero: whether step() leaves the parameter all-gather to the next forward.
  bool gather_overlap = false;
  // The ranks that train (all but dedicated parameter servers).
  lockstep::torch::Group workers;

  int64_t param_bytes() const;
  int64_t optimizer_state_bytes() const;
  int64_t peak_activation_bytes = 0;
  // Closed-form bytes this rank sends per step (Note [Closed forms] in strategies.cc).
  virtual double closed_form_bytes_per_step(int64_t batch) const = 0;
  // Pipeline: this step's idle share, else nullopt.
  virtual std::optional<double> idle_fraction() const { return std::nullopt; }

 protected:
  std::vector<::torch::Tensor> params_;  // held by this rank
  std::unique_ptr<::torch::optim::Optimizer> optimizer_;
};

// How many data-parallel replicas the flags give (no communication).
int data_replicas(const StrategyFlags& flags);

// Collective over every rank (builds meshes and groups). Throws
// lockstep::InvalidArgument for a mesh that does not fit the strategy.
std::unique_ptr<Strategy> make_strategy(const StrategyFlags& flags);

}  // namespace lockstep::examples
