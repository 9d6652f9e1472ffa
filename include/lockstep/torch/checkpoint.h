// Checkpoints: model + optimizer + training position + RNG state in one file,
// written atomically so a crash or kill mid-write leaves the previous
// checkpoint intact and loadable.
//
// Writing: the bytes go to a temporary file in the same directory, which is
// fsync'ed, renamed over the target, and the directory fsync'ed. Only rank 0
// writes (save_checkpoint is a no-op elsewhere; call it on every rank).
// Reading: every rank loads the same file (a shared or local filesystem).
//
// A resumed run continues exactly as the uninterrupted one: it restores the
// parameters and buffers, the optimizer state, the sampler's epoch and
// position, the step counter and LibTorch's default CPU generator.
#pragma once

#include <torch/torch.h>

#include "lockstep/torch/state_check.h"

#include <cstdint>
#include <string>

namespace lockstep::torch {

struct TrainingProgress {
  int64_t epoch = 0;
  int64_t step = 0;     // optimizer steps done
  std::string sampler;  // DistributedSampler::save()
  std::string user;     // anything else the caller wants back
};

// Collective-free; writes only on rank 0. Throws lockstep::Error naming the
// path and the errno text on I/O failure, and InvalidArgument (before
// writing anything) for a model whose parameters hold no memory: one held by
// a FullyShardedModel, which lockstep::parallel::save_checkpoint saves.
void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     const ::torch::optim::Optimizer& optimizer, const TrainingProgress& progress);
// Returns false when `path` does not exist; throws lockstep::Error when it is
// unreadable, corrupt, not a lockstep checkpoint (a safetensors or torch.save
// file is named as such, with the call that reads it), or written for
// another model: every name, shape and dtype is compared with the module
// first (check_state_matches, lockstep/torch/state_check.h), the error names
// the first tensor of another shape, the first missing and the first extra
// one, and the module, the optimizer and `progress` keep what they held.
// Values are copied into the module's own tensors (their storage stays).
// Restores the default CPU generator too.
bool load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                     ::torch::optim::Optimizer& optimizer, TrainingProgress& progress);

// What `bytes` look like: "a safetensors file", "a PyTorch torch.save file",
// "a TorchScript/LibTorch archive" (lockstep checkpoints are such archives),
// "empty" or "not a file format lockstep knows". For error messages.
std::string file_kind(const std::string& bytes);

namespace detail {
// Throws InvalidArgument, naming `call`, `path` and the call that does save
// such a model, for a module that is not whole on this rank: one holding a
// PartialState layer (tensor parallel) or parameters without memory (held
// by a FullyShardedModel). Every call that reads or writes a module's whole
// tensors from one rank's copy asks this first.
void require_whole_state(const ::torch::nn::Module& module, const char* call,
                         const std::string& path);
// load_checkpoint with the check's options (the layout-independent
// checkpoints of lockstep/parallel load into placeholders of the whole
// model's shapes).
bool load_checkpoint_checked(const std::string& path, ::torch::nn::Module& module,
                             ::torch::optim::Optimizer& optimizer, TrainingProgress& progress,
                             const StateCheckOptions& check);
}  // namespace detail

// Writes `bytes` to `path` atomically (temp file, fsync, rename, fsync dir).
// The temp file is `.<name>.tmp.<host>.<pid>.<n>` beside `path`, locked by
// this process while it exists, so clean-up can tell a live writer's from one
// a killed writer left (docs/torch.md, "Checkpoints").
void write_file_atomically(const std::string& path, const std::string& bytes);

// Removes the temporary files an interrupted write_file_atomically(path)
// left beside `path`, never one whose writer is still alive; returns how many
// (logged as a warning). load_checkpoint() and ElasticState::load_checkpoint()
// call it, so a resumed job cleans up after the run that was killed.
uint64_t remove_stale_temporary_files(const std::string& path);

}  // namespace lockstep::torch
