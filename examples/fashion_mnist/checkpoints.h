// The main job's checkpoints under --checkpoint-dir, in --checkpoint-format:
//   file     checkpoint.pt, written by rank 0 (lockstep::torch::save_checkpoint)
//   sharded  step-<N>/ folders of safetensors, every rank writing its share
//            (lockstep::parallel::CheckpointWriter; docs/torch.md), the last
//            two complete steps kept
//   async    sharded, written by a background thread once this rank's share
//            is copied to host memory: training goes on meanwhile
// Rank 0 prints how long each save held training up ("checkpoint ...:
// training paused X ms" on stderr), the number bench/checkpoint_main_job.sh
// compares across formats.
//
// One per process, used from the training thread (not thread-safe). Owns the
// CheckpointWriter (and so the async write in flight); the destructor waits
// for it.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "fashion_mnist/options.h"
#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/torch/checkpoint.h"

namespace lockstep::examples {

class JobCheckpoints {
 public:
  // Throws lockstep::InvalidArgument for a sharded format in an elastic job
  // (the world can change while a save is in flight).
  JobCheckpoints(const Options& options, bool elastic);

  bool enabled() const { return !o_.checkpoint_dir.empty(); }
  // Collective: every rank calls it at the same step.
  void save(const ::torch::nn::Module& model, const ::torch::optim::Optimizer& optimizer,
            const lockstep::torch::TrainingProgress& progress);
  // The newest checkpoint of --checkpoint-format into the model, the
  // optimizer and `progress`; false when there is none.
  bool load(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
            lockstep::torch::TrainingProgress& progress);
  // Once a step: rethrows a failed background write (async). Never blocks.
  void poll();
  // At the end: until the write in flight is done; rethrows its error.
  void wait();
  // What was loaded or saved last, for messages.
  std::string where() const;

 private:
  bool sharded() const { return o_.checkpoint_format != "file"; }
  lockstep::parallel::CheckpointWriter& writer();

  const Options& o_;
  std::unique_ptr<lockstep::parallel::CheckpointWriter> writer_;  // made at the first save
};

}  // namespace lockstep::examples
