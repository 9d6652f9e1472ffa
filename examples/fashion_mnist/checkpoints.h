// The main job's checkpoints under --checkpoint-dir, in --checkpoint-format:
//   file     checkpoint.pt, written by rank 0 (lockstep::torch::save_checkpoint)
//   sharded  step-<N>/ folders of safetensors, every rank writing its share
//            (lockstep::parallel::CheckpointWriter; docs/torch.md), the last
//            two complete steps kept
//   async    sharded, written by a background thread once this rank's share
//            is copied to host memory: training goes on meanwhile
// The averaged weights (--ema, --lookahead) go with each checkpoint as
// averages/step-<N>.pt, written by rank 0 (in the background in async, like
// the tensors), so a resume from step N takes the averages of step N or
// none; the newest three are kept.
// Rank 0 prints how long each save held training up ("checkpoint ...:
// training paused X ms" on stderr), the number bench/checkpoint_main_job.sh
// compares across formats.
//
// One per process, used from the training thread (not thread-safe). Owns the
// CheckpointWriter (and so the async write in flight); the destructor waits
// for it.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "fashion_mnist/options.h"
#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/torch/checkpoint.h"

namespace lockstep::examples {

class JobCheckpoints {
 public:
  // Throws lockstep::InvalidArgument for a sharded format in an elastic job
  // (the world can change while a save is in flight).
  JobCheckpoints(const Options& options, bool elastic);
  JobCheckpoints(const JobCheckpoints&) = delete;
  JobCheckpoints& operator=(const JobCheckpoints&) = delete;
  ~JobCheckpoints();  // waits for the writes in flight (an error is logged)

  bool enabled() const { return !o_.checkpoint_dir.empty(); }
  // Collective: every rank calls it at the same step. `averages` (rank 0
  // calls it, inside the pause it reports): the serialized averaged weights
  // of this step, empty for none.
  void save(const ::torch::nn::Module& model, const ::torch::optim::Optimizer& optimizer,
            const lockstep::torch::TrainingProgress& progress,
            const std::function<std::string()>& averages = {});
  // The newest checkpoint of --checkpoint-format into the model, the
  // optimizer and `progress`; false when there is none.
  bool load(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
            lockstep::torch::TrainingProgress& progress);
  // The averages saved with step `step`'s checkpoint; nullopt when none.
  std::optional<std::string> load_averages(int64_t step) const;
  // Once a step: rethrows a failed background write (async). Never blocks.
  void poll();
  // At the end: until the write in flight is done; rethrows its error.
  void wait();
  // What was loaded or saved last, for messages.
  std::string where() const;

 private:
  bool sharded() const { return o_.checkpoint_format != "file"; }
  lockstep::parallel::CheckpointWriter& writer();
  std::string averages_path(int64_t step) const;
  // Rank 0: step's averages, then retention; on averages_thread_ in async.
  void write_averages(int64_t step, const std::string& bytes) const;
  void join_averages();  // rethrows the background write's error

  const Options& o_;
  std::unique_ptr<lockstep::parallel::CheckpointWriter> writer_;  // made at the first save
  std::thread averages_thread_;        // async: the averages write in flight
  std::exception_ptr averages_error_;  // its error, set before averages_done_
  std::atomic<bool> averages_done_{false};
};

}  // namespace lockstep::examples
