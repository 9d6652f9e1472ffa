// World-size-independent checkpoints. Every strategy writes the same file as
// lockstep::torch::save_checkpoint on one process: the whole model and the
// optimizer state of every whole parameter. So a checkpoint written by N
// data-parallel or ZeRO workers loads on M workers of either kind (and on a
// single process) and continues the same trajectory.
//
// Note [One checkpoint call]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// lockstep::parallel::save_checkpoint(path, model, optimizer, progress) and
// load_checkpoint(...) take whatever is trained -- a module (plain, or
// holding tensor-parallel layers), a FullyShardedModel, a Pipeline, with a
// torch optimizer or a ShardedOptimizer -- and ask it how its state is laid
// out (lockstep/torch/state_layout.h), so there is nothing to choose wrong.
// The same holds for checkpoint directories: CheckpointWriter::save(model,
// optimizer, progress) and load_checkpoint_dir(root, model, optimizer,
// progress). A module its owner lays out (a Pipeline's stage) is refused by
// name in favour of the owner, and lockstep::torch's one-rank calls refuse
// any model that is not whole on every rank, naming the call above.
//
//   data parallel: every rank holds everything already; rank 0 writes
//                  (lockstep::torch::save_checkpoint);
//   ZeRO:          the overloads below gather the optimizer shards into
//                  whole-parameter state before rank 0 writes, and on load
//                  every rank reads the whole state and keeps its slices;
//   tensor and pipeline parallel (and both): the ModelParts overloads
//                  below gather the whole parameters *and* their optimizer
//                  state (Adam's moments...) to rank 0, which writes them
//                  under the whole model's names; loading takes this rank's
//                  slices of both. So a tensor-parallel checkpoint written
//                  at 2 ranks resumes at 3, or as a 2-stage pipeline, or on
//                  one process with a plain model (ModelParts of a dense
//                  module), with the same optimizer state.
//
// Collective over the ShardedOptimizer's group (ZeRO) or every rank of the
// job (ModelParts). Memory: saving assembles the whole optimizer state on
// every rank of the group for a moment; loading reads it on every rank (as
// lockstep::torch::load_checkpoint does).
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/parallel/pipeline.h"
#include "lockstep/parallel/sharded_optimizer.h"
#include "lockstep/parallel/tensor_parallel.h"
#include "lockstep/torch/checkpoint.h"

namespace lockstep::parallel {

void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     ShardedOptimizer& optimizer,
                     const lockstep::torch::TrainingProgress& progress);
// False when `path` does not exist; lockstep::Error when it is corrupt or
// does not match the model.
bool load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                     ShardedOptimizer& optimizer, lockstep::torch::TrainingProgress& progress);

// What this rank holds of a model split by tensor and/or pipeline
// parallelism: its parameters and buffers under the whole model's names
// (the names a single-process model has), each sharded one with its slice.
// Replicas (data-parallel copies) may hold the same names; one is kept.
struct ModelParts {
  std::vector<std::pair<std::string, ::torch::Tensor>> parameters{};
  std::vector<std::pair<std::string, ::torch::Tensor>> buffers{};
  std::map<std::string, ShardSpec> shards{};  // by name in `parameters`
  int stage = 0;  // pipeline stage: the whole model's order is (stage, position)
};
// A (tensor-parallel or plain) module: shards found through ShardedModule.
ModelParts model_parts(const ::torch::nn::Module& module);
// A pipeline stage (whose layers may be tensor-parallel).
ModelParts model_parts(Pipeline& pipeline);

// The one call (Note [One checkpoint call]): a plain module as
// lockstep::torch::save_checkpoint (rank 0 writes; collective-free), a
// tensor-parallel one as its model_parts below (collective over every
// rank). InvalidArgument for a module held by a FullyShardedModel or a
// Pipeline, naming the call with the holder.
void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     ::torch::optim::Optimizer& optimizer,
                     const lockstep::torch::TrainingProgress& progress);
bool load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                     ::torch::optim::Optimizer& optimizer,
                     lockstep::torch::TrainingProgress& progress);
// A pipeline (whose stages may be tensor-parallel): model_parts(pipeline).
void save_checkpoint(const std::string& path, Pipeline& pipeline,
                     ::torch::optim::Optimizer& optimizer,
                     const lockstep::torch::TrainingProgress& progress);
bool load_checkpoint(const std::string& path, Pipeline& pipeline,
                     ::torch::optim::Optimizer& optimizer,
                     lockstep::torch::TrainingProgress& progress);

// `optimizer` holds this rank's parameters of `parts` (param group g must
// mean the same on every rank: a single-process optimizer's group g holds
// group g's parameters of every stage, in model order). The file is the one
// lockstep::torch::save_checkpoint writes, with the whole model's names;
// a plain model loads it with load_checkpoint(path, model_parts(model), ...).
// Collective over every rank of the job. Throws lockstep::Error naming a
// parameter whose shape, slices or param group disagree between ranks.
void save_checkpoint(const std::string& path, const ModelParts& parts,
                     ::torch::optim::Optimizer& optimizer,
                     const lockstep::torch::TrainingProgress& progress);
// False when `path` does not exist; lockstep::Error when it is corrupt or
// lacks (or has another shape for) one of the model's parameters.
bool load_checkpoint(const std::string& path, const ModelParts& parts,
                     ::torch::optim::Optimizer& optimizer,
                     lockstep::torch::TrainingProgress& progress);

// The same in checkpoint directories (lockstep/parallel/checkpoint_dir.h:
// sharded safetensors files every rank writes, optionally asynchronous): the
// directory holds the whole model's tensors under its single-process names,
// so a tensor- or pipeline-parallel run's directory loads at any layout, and
// into a plain model with load_checkpoint_dir(root, module, ...). Saving is
// writer.save(parts, optimizer, progress): each slice goes straight to the
// rank that writes its tensor, and no rank assembles the model. Loading is
// routed too: the manifest is checked against the whole model the ranks
// describe (lockstep::Error naming the first mismatch, nothing changed),
// then each rank reads only its own slices and their optimizer state.
// Collective over every rank of the job.
void save_checkpoint_dir(CheckpointWriter& writer, const ModelParts& parts,
                         ::torch::optim::Optimizer& optimizer,
                         const lockstep::torch::TrainingProgress& progress);
bool load_checkpoint_dir(const std::string& root, const ModelParts& parts,
                         ::torch::optim::Optimizer& optimizer,
                         lockstep::torch::TrainingProgress& progress);
bool load_checkpoint_dir(const std::string& root, Pipeline& pipeline,
                         ::torch::optim::Optimizer& optimizer,
                         lockstep::torch::TrainingProgress& progress);

}  // namespace lockstep::parallel
