// World-size-independent checkpoints. Every strategy writes the same file as
// lockstep::torch::save_checkpoint on one process: the whole model and the
// optimizer state of every whole parameter. So a checkpoint written by N
// data-parallel or ZeRO workers loads on M workers of either kind (and on a
// single process) and continues the same trajectory.
//
//   data parallel: lockstep::torch::save_checkpoint / load_checkpoint
//                  (every rank holds everything already);
//   ZeRO:          the overloads below gather the optimizer shards into
//                  whole-parameter state before rank 0 writes, and on load
//                  every rank reads the whole state and keeps its slices;
//   tensor parallel: full_state_dict / load_full_state_dict
//                  (lockstep/parallel/tensor_parallel.h) move whole tensors.
//
// Collective over the ShardedOptimizer's group. Memory: saving assembles the
// whole optimizer state on every rank of the group for a moment; loading
// reads it on every rank (as lockstep::torch::load_checkpoint does).
#pragma once

#include <torch/torch.h>

#include <string>

#include "lockstep/parallel/sharded_optimizer.h"
#include "lockstep/torch/checkpoint.h"

namespace lockstep::parallel {

void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     ShardedOptimizer& optimizer, const lockstep::torch::TrainingProgress& progress);
// False when `path` does not exist; lockstep::Error when it is corrupt or
// does not match the model.
bool load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                     ShardedOptimizer& optimizer, lockstep::torch::TrainingProgress& progress);

}  // namespace lockstep::parallel
