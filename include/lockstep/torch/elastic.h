// Elastic training, worker side (docs/elastic-state.md): the state a job
// needs to survive losing or gaining workers, and the loop that re-forms the
// world around it.
//
// ElasticState holds references to the model, the optimizer, optionally the
// sampler and the DistributedOptimizer, plus the user's counters. commit()
// takes an in-memory snapshot (cheap: clones and bytes, no disk); restore()
// goes back to it; sync(root) makes every rank equal to root. run_elastic()
// calls the training function and, in elastic mode, when a peer dies
// (PeerFailure/Aborted) or the launcher adds workers (WorldChanged, raised by
// commit()), re-forms the world, restores the last commit, syncs from rank 0
// and calls the function again. The function must therefore continue from
// state.epoch/state.step and the sampler's position, not from scratch.
//
// Outside elastic mode (LOCKSTEP_ELASTIC unset) run_elastic() is sync() then
// one call, and commit() never throws WorldChanged, so the same program runs
// under plain `lockstep run -np N` and as a single process.
//
// Thread-safety: none; an ElasticState is used by the training thread that
// owns the model and optimizer. It references (does not own) model,
// optimizer, sampler and DistributedOptimizer; it owns its snapshot.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "lockstep/torch/distributed_optimizer.h"
#include "lockstep/torch/sampler.h"

namespace lockstep::torch {

class ElasticState {
 public:
  // Every referenced object must outlive this one. `sampler` and `dist` may
  // be null; with a sampler its epoch and global position are committed and
  // synced, and sync() re-partitions the epoch for the current world.
  ElasticState(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
               DistributedSampler* sampler = nullptr, DistributedOptimizer* dist = nullptr);
  ElasticState(const ElasticState&) = delete;
  ElasticState& operator=(const ElasticState&) = delete;

  // The user's counters and values: committed, restored and synced with the
  // model. values travel bitwise (doubles, not text).
  int64_t epoch = 0;
  int64_t step = 0;
  std::map<std::string, double> values;

  // Snapshots parameters and buffers (clones), the optimizer state and
  // hyper-parameters (serialised), the sampler's epoch and global position,
  // and epoch/step/values. Call it at a step boundary on every rank (after
  // step(), nothing in flight). In elastic mode it is collective: rank 0 asks
  // the launcher whether a newer generation exists and broadcasts the
  // answer; if so every rank throws engine::WorldChanged after the snapshot
  // is complete, so nothing is lost.
  void commit();
  // Back to the last commit (model, optimizer, sampler, counters); resets the
  // DistributedOptimizer's in-flight state and zeroes gradients. Local, no
  // communication. Throws lockstep::Error when nothing was committed yet.
  void restore();
  // Collective: makes everything (parameters, buffers, optimizer state,
  // counters, values, sampler position, reformations()) equal to root's
  // current state, re-partitions the sampler's epoch for rank()/size(), and
  // commits locally (no generation check), so every rank holds the same
  // last commit. Then runs the on_reset() callbacks, and arms a parameter
  // fingerprint check (check_parameters_agree) at the next commit().
  void sync(int root = 0);

  // Horovod's state.register_reset_callbacks: `callback` runs at the end of
  // every sync(), so on survivors and joiners alike after each re-formation
  // (and once at the start), in registration order. Put what depends on
  // the world there, e.g. the learning rate scaled by size(): sync() gives a
  // joiner rank 0's hyper-parameters, so a rate set where the elastic
  // function starts would differ between survivors and joiners, and the
  // ranks would train different models. The first commit() after each
  // sync() compares parameter fingerprints across ranks and throws
  // MismatchError naming the first differing parameter when they differ.
  void on_reset(std::function<void()> callback);

  bool has_commit() const { return committed_.valid; }
  // Generation of the current world (0 outside elastic mode).
  int generation() const;
  // How many times the world re-formed under this job, as rank 0 counts it
  // (sync() takes rank 0's value, so joiners agree).
  int reformations() const { return reformations_; }

  // Disk checkpoint of the last commit, for restarts of the whole job:
  // written by rank 0 only (atomically, see checkpoint.h); call on every
  // rank. Throws lockstep::Error when nothing was committed yet.
  void save_checkpoint(const std::string& path) const;
  // Every rank: loads `path` as the last commit and restore()s it. Returns
  // false when the file does not exist; throws lockstep::Error naming the
  // file when it is corrupt or does not match the model.
  bool load_checkpoint(const std::string& path);

  // For run_elastic(): drops the DistributedOptimizer's in-flight state.
  void reset_in_flight() noexcept;
  void count_reformation() { ++reformations_; }

 private:
  struct Snapshot {
    bool valid = false;
    std::vector<::torch::Tensor> tensors;  // parameters then buffers
    std::string optimizer;                 // save_optimizer() bytes
    int64_t epoch = 0, step = 0;
    std::map<std::string, double> values;
    int64_t sampler_epoch = 0, sampler_position = 0;  // global position
  };

  Snapshot snapshot() const;
  void apply(const Snapshot& snapshot);
  void check_generation() const;
  void check_parameters_after_sync();
  std::vector<::torch::Tensor> state_tensors() const;

  ::torch::nn::Module& model_;
  ::torch::optim::Optimizer& optimizer_;
  DistributedSampler* sampler_;
  DistributedOptimizer* dist_;
  Snapshot committed_;
  int reformations_ = 0;
  std::vector<std::function<void()>> reset_callbacks_;
  bool fingerprint_due_ = false;  // at the first commit() after sync()
};

// Calls fn(state) until it returns normally. Outside elastic mode: sync(0),
// then fn(state) once; every exception propagates. In elastic mode, on
// PeerFailure, Aborted or engine::WorldChanged out of sync() or fn: logs the
// cause, shuts the engine down, waits for the next generation of the world
// (up to LOCKSTEP_TIMEOUT seconds), starts the engine on it, restores the
// last commit (not after WorldChanged: the commit just happened), sync(0)s
// and calls fn again. engine::ElasticJobFailed, TimeoutError and every other
// exception propagate.
void run_elastic(ElasticState& state, const std::function<void(ElasticState&)>& fn);

// Elastic mode: starts the process-wide engine on this worker's world of
// the generation it was started into (engine::wait_for_world). Called by
// lockstep::torch::init() when engine::elastic_enabled(); not needed
// otherwise.
void init_elastic_world();
// The generation the engine currently runs (0 outside elastic mode).
int elastic_generation();

}  // namespace lockstep::torch
