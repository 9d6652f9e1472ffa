// Checkpoint directories: sharded, optionally asynchronous checkpoints in
// safetensors files, written by every rank in parallel (no gather to rank 0)
// and readable by any safetensors reader (docs/torch.md, "Checkpoint
// directories"; docs/interop.md).
//
// Note [Checkpoint directory layout]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
//   <root>/step-<8-digit step>/
//     model-0000r-of-0000N.safetensors      rank r-1's share of the parameters and
//                                           buffers (whole tensors, state_dict names)
//     model.safetensors.index.json          Hugging Face's {"metadata", "weight_map"}
//     optimizer-0000r-of-0000N.safetensors  "<param name>.<state key>" (Adam's
//                                           "fc1.weight.exp_avg"; scalars as 0-d tensors)
//     manifest.json                         written last, by rank 0
// Whole tensors are assigned to ranks greedily by bytes (largest first, to
// the least loaded rank, ties by name and rank), a pure function of the names
// and shapes every rank holds, so every rank computes the same assignment and
// writes only its own two files. Each rank's files are fsync'ed; then the
// ranks meet. A synchronous save meets in a collective of every rank's
// error text (none: written), after which rank 0 writes the index and
// manifest.json (temp file + rename) and a second collective carries its
// outcome, so every rank returns or throws alike. An async save meets
// through files, as no collective runs on the background thread: each rank
// writes `rank-<r>.done` (or `.failed`, holding the save's id and the
// error), rank 0 waits for all N markers (bounded by
// CheckpointDirOptions::peer_timeout; the error names the missing ranks),
// writes the index and manifest and removes the markers.
// A step directory without manifest.json is an interrupted save: saves and
// loads remove such leftovers, but only while no writer holds the shared lock
// on <root>/.lockstep-checkpoint.lock (every writer holds it from before it
// creates its step directory until its files are written, rank 0 until its
// manifest is in), so a live writer's directory is never removed. The newest step-* with a manifest
// is the checkpoint; nothing else points at it.
//
// Strategies: a data-parallel model (every rank holds everything), and
// FullyShardedModel (HSDP too), ShardedOptimizer (ZeRO) and tensor- and
// pipeline-parallel ModelParts routed: each rank
// sends its own pieces straight to the ranks that write them and a load reads
// only its own byte ranges, so no rank holds the whole model (Note [Routed
// checkpoint saves] in src/parallel/checkpoint_dir_routed_save.cc); the files
// are the same bytes either way. A sharding group that leaves ranks of the
// job out (no replicas covering them) goes through the full view instead.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>

#include "lockstep/parallel/fully_sharded.h"
#include "lockstep/parallel/sharded_optimizer.h"
#include "lockstep/torch/checkpoint.h"

namespace lockstep::parallel {

struct ModelParts;  // lockstep/parallel/checkpoint.h
class Pipeline;     // lockstep/parallel/pipeline.h

struct CheckpointDirOptions {
  int keep_last = 0;   // after a manifest lands, keep the newest K complete steps (0: all)
  bool async = false;  // snapshot this rank's share to host memory, return, write in the background
  // How long rank 0 waits for the other ranks' files before giving up on a save.
  std::chrono::seconds peer_timeout{600};
};

// Writes checkpoint directories under `root` (which must be one directory
// every rank sees: a shared filesystem across hosts). One per job per rank.
// Not thread-safe: the training thread calls it. Owns its background thread
// (async): at most one save is in flight; the destructor waits for it (never
// loses it) and logs, not throws, its error.
class CheckpointWriter {
 public:
  explicit CheckpointWriter(std::string root, CheckpointDirOptions options = {});
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Collective over every rank of the job. Synchronous: returns when the
  // checkpoint is complete (manifest written) or throws on every rank.
  // Async: waits for the save in flight, then returns once this rank's share
  // is copied to host memory. A failed background write (lockstep::Error
  // naming the path and errno) is rethrown by the next save(), poll() or
  // wait() of that rank; the next save() then throws on every rank. Throws
  // lockstep::InvalidArgument when step `progress.step` already has a
  // complete checkpoint, or the ranks hold different tensors.
  // A module: whole on every rank (data parallel), or holding
  // tensor-parallel layers, which go the ModelParts way below (Note [One
  // checkpoint call] in lockstep/parallel/checkpoint.h). InvalidArgument,
  // nothing written, for a module a FullyShardedModel or Pipeline holds.
  void save(const ::torch::nn::Module& module, const ::torch::optim::Optimizer& optimizer,
            const lockstep::torch::TrainingProgress& progress);
  // Routed: every rank's segments straight to their writers (no full view).
  // The optimizer must be built on fsdp.parameters() in one param group.
  void save(FullyShardedModel& fsdp, ::torch::optim::Optimizer& optimizer,
            const lockstep::torch::TrainingProgress& progress);
  // ZeRO: the optimizer-state segments routed to their writers.
  void save(const ::torch::nn::Module& module, ShardedOptimizer& optimizer,
            const lockstep::torch::TrainingProgress& progress);
  // Tensor and pipeline parallelism (model_parts(module), model_parts(pipeline)):
  // each slice routed to its tensor's writer, the files those of the whole
  // model under its single-process names (no rank assembles the model).
  void save(const ModelParts& parts, const ::torch::optim::Optimizer& optimizer,
            const lockstep::torch::TrainingProgress& progress);
  void save(Pipeline& pipeline, const ::torch::optim::Optimizer& optimizer,
            const lockstep::torch::TrainingProgress& progress);
  // Call once a step: rethrows a finished background save's error; never blocks.
  void poll();
  // Until no save is in flight; rethrows its error.
  void wait();

  const std::string& root() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Loads the newest complete checkpoint under `root` into the module (a
// tensor-parallel one is routed as load_checkpoint_dir(root,
// model_parts(module), ...) of lockstep/parallel/checkpoint.h), the
// optimizer, `progress` and LibTorch's default CPU generator (this rank's
// saved state at the same world size, rank 0's at another). False when there
// is none. Every name, shape and dtype (of the model, and of the optimizer's
// param groups and state) is checked first, and the files' headers against
// the manifest; a mismatch throws lockstep::Error naming the first one
// before anything is changed. Works at any world size: every rank reads all
// files. Collective-free.
bool load_checkpoint_dir(const std::string& root, ::torch::nn::Module& module,
                         ::torch::optim::Optimizer& optimizer,
                         lockstep::torch::TrainingProgress& progress);
// Into a FullyShardedModel of any world size and units: each rank reads its
// own segments' byte ranges; collective over fsdp's group (the units that
// stay gathered are gathered again).
bool load_checkpoint_dir(const std::string& root, FullyShardedModel& fsdp,
                         ::torch::optim::Optimizer& optimizer,
                         lockstep::torch::TrainingProgress& progress);
// Into a ZeRO optimizer of any world size: each rank reads the parameters
// and its own state segments. Collective-free.
bool load_checkpoint_dir(const std::string& root, ::torch::nn::Module& module,
                         ShardedOptimizer& optimizer, lockstep::torch::TrainingProgress& progress);

// The newest complete step directory under `root` ("" when none).
std::string newest_checkpoint_dir(const std::string& root);

}  // namespace lockstep::parallel
