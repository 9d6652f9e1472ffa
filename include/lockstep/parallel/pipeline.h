// Pipeline parallelism: the layers of a torch::nn::Sequential split into
// consecutive stages, one per rank of a pipeline group; each step's batch is
// cut into m micro-batches that flow forward through the stages while their
// gradients flow back (GPipe, Huang et al. 2019; 1F1B, PipeDream-flush,
// Narayanan et al. 2021).
//
//   Pipeline pipe(model, {.micro_batches = 4, .schedule = Schedule::k1F1B,
//                         .group = mesh.group("pipeline")});
//   torch::optim::Adam adam(pipe.parameters(), 1e-3);   // this stage's only
//   adam.zero_grad();
//   double loss = pipe.train_step(x, y, cross_entropy);  // valid on the last stage
//   adam.step();
//
// Every stage calls train_step with the batch: stage 0 reads `input`, the
// last stage `target`, the others only use them for nothing (pass undefined
// tensors if they do not have the data). The batch size travels from stage
// 0 each step; activation shapes and dtypes are agreed once per micro-batch
// size and every later transfer is checked against them (Note [Pipeline
// transfers] in src/parallel/pipeline.cc).
//
// The loss function must return the mean over its micro-batch; each
// micro-batch's loss is weighted by its share of the batch, so gradients
// equal those of the whole batch's mean loss, accumulated into this stage's
// parameters (zero them before the step, step the optimizer after). With
// DistributedOptimizer over a data-parallel group, set
// backward_passes_per_step = micro_batches (each micro-batch is a backward
// pass). A dead stage fails every other stage's train_step with PeerFailure
// naming it (the engine's liveness, within seconds); nothing hangs.
//
// Construction is collective over every rank of the job (each pipeline
// group's neighbouring pairs get their own process sets). Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/torch/group.h"

namespace lockstep::parallel {

using Group = lockstep::torch::Group;

enum class Schedule {
  kGPipe,  // all forwards, then all backwards: m micro-batches of activations alive
  k1F1B,   // warm-up forwards, then one forward one backward: at most p - stage alive
};
Schedule parse_schedule(const std::string& name);  // "gpipe" | "1f1b"

struct PipelineAction {
  bool forward = true;
  int micro_batch = 0;
  bool operator==(const PipelineAction&) const = default;
};
// The order in which `stage` of `stages` runs the m micro-batches' forward
// and backward passes.
std::vector<PipelineAction> pipeline_schedule(Schedule schedule, int stage, int stages, int m);

// Contiguous split of layers with these parameter counts into `stages` parts,
// minimising the largest part (each part gets at least one layer). Returns
// the number of layers per stage.
std::vector<int> balance_by_parameters(const std::vector<int64_t>& layer_params, int stages);

struct PipelineOptions {
  int micro_batches = 1;
  Schedule schedule = Schedule::k1F1B;
  // Layers per stage (sums to the model's length); empty: balanced by
  // parameter count.
  std::vector<int> partition{};
  Group group{};            // the pipeline group; stage = group.rank()
  std::string name = "pp";  // collective-name prefix
};

using LossFunction =
    std::function<::torch::Tensor(const ::torch::Tensor& output, const ::torch::Tensor& target)>;

// Timing and memory of the last step on this stage.
struct PipelineStepStats {
  double step_seconds = 0;
  double compute_seconds = 0;  // forward, backward and loss of this stage
  double receive_wait_seconds = 0;
  int64_t peak_activation_bytes = 0;  // layer outputs of the micro-batches in flight
  // 1 - compute/step: the idle share of this stage (bubble plus transfers).
  double idle_fraction() const { return step_seconds > 0 ? 1 - compute_seconds / step_seconds : 0; }
};

class Pipeline {
 public:
  // `model` is the whole network, built identically on every rank (same
  // seed); each rank keeps its stage's layers. Throws InvalidArgument for a
  // partition that does not fit, fewer layers than stages, or m < 1.
  Pipeline(::torch::nn::Sequential model, PipelineOptions options);
  // One module per stage (stages.size() == group size); names are
  // "<stage>.<layer>.<param>".
  Pipeline(std::vector<::torch::nn::Sequential> stages, PipelineOptions options);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Forward and backward of one batch; returns the batch's mean loss on the
  // last stage, 0 on the others.
  double train_step(const ::torch::Tensor& input, const ::torch::Tensor& target,
                    const LossFunction& loss);
  // Inference (no gradients, pipelined by micro-batch): the output on the
  // last stage, an undefined tensor on the others.
  ::torch::Tensor forward(const ::torch::Tensor& input);

  int stage() const;
  int num_stages() const;
  bool is_first() const { return stage() == 0; }
  bool is_last() const { return stage() == num_stages() - 1; }
  // [first, first + count) of the model's layers on `stage`.
  std::pair<int, int> layers_of(int stage) const;
  // This stage's layers (sharing the model's modules).
  ::torch::nn::Sequential& module();
  std::vector<::torch::Tensor> parameters() const;
  // Names as in the whole model ("3.weight"), so a checkpoint of all stages
  // is the single-process model's.
  std::vector<std::pair<std::string, ::torch::Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, ::torch::Tensor>> named_buffers() const;
  const PipelineStepStats& last_step() const;
  const PipelineOptions& options() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::parallel
