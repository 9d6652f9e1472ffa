// SameBitsStep: data-parallel training whose state after N steps is bitwise
// identical whatever the number of workers (docs/same-bits.md).
//
// Note [Same bits at any world size]
// - The global batch of each step is K micro-batches (K fixed, independent
//   of the world size). With n workers (n must divide K), rank r runs the
//   micro-batches r*K/n .. (r+1)*K/n - 1, each as its own forward/backward
//   pass, so every micro-batch's gradient has the same shape and the same
//   bits on any n. The loss callback picks the samples of micro-batch
//   (step, index): a function of the global position only, never the rank.
// - Gradients are summed exactly: per tensor t, one MAX allreduce (all
//   tensors fused) gives the max-abs M_t over all K micro-batches and
//   e_t = the exponent with M_t < 2^e_t; each gradient becomes
//   round(g * 2^(k - e_t)) in int64 with k = 62 - ceil(log2 K), so K of them
//   cannot overflow; they are summed in int64 locally and by one SUM
//   allreduce (integer addition is associative: the same bits for any n and
//   any reduction order), then g = sum * 2^(e_t - k) / K in f64, rounded to
//   f32. Error bound: K * 2^(e_t - k - 1) <= K * 2^-k * M_t before the final
//   rounding (with K = 8: 2^-59 M_t, far below f32's 2^-24).
// - BatchNorm (torch::nn::BatchNorm{1,2,3}d): each micro-batch is normalised
//   with its own statistics (ghost BN of micro-batch size); the per-micro-
//   batch batch mean/var are allgathered (one allgather, all layers fused)
//   and every rank applies the running-statistics updates in micro-batch
//   order 0..K-1.
// - RNG: the default CPU generator is seeded from (seed, step, micro-batch)
//   before each micro-batch (dropout, augmentation), and from (seed, step, K)
//   after the step, so no stream depends on the rank.
// - Kernels: torch::set_num_threads(intra_op_threads) (fixed, default 1) and
//   LibTorch's deterministic-algorithm switch, set by the constructor.
//
// Refused by name (InvalidArgument, at construction): a world size that does
// not divide K, SyncBatchNorm and GhostBatchNorm modules, BatchNorm with
// momentum None (cumulative average), parameters that are not f32 CPU
// tensors with memory (FSDP shards). The optimizer is a plain
// torch::optim::Optimizer, run identically on every rank: DistributedOptimizer
// (and so its fp16/bf16/1-bit/PowerSGD compression) and ZeRO do not compose
// with it. A non-finite gradient throws lockstep::Error on every rank.
//
// Every rank must construct it over identical parameters and call step()
// the same number of times (collective). Under run_elastic, construct it in
// the elastic function (the world size may have changed) and call
// set_steps_done(state.step): ElasticState carries the rest. Not thread-safe; holds references
// to the model and the optimizer, which must outlive it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lockstep::torch {

struct MicroBatch {
  int64_t step = 0;   // global step number (0-based)
  int64_t index = 0;  // micro-batch index within the step, 0..count-1
  int64_t count = 0;  // K
  // Micro-batches before this one since step 0: step * K + index.
  int64_t global_index() const { return step * count + index; }
};

struct SameBitsOptions {
  int64_t micro_batches = 8;  // K; the supported world sizes divide it
  uint64_t seed = 0;          // the RNG streams' key
  int intra_op_threads = 1;   // fixed T for LibTorch's CPU kernels
};

// Returns the micro-batch's loss (a scalar, the mean over its samples).
using MicroBatchLoss = std::function<::torch::Tensor(const MicroBatch&)>;

class SameBitsStep {
 public:
  SameBitsStep(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
               SameBitsOptions options);
  SameBitsStep(const SameBitsStep&) = delete;
  SameBitsStep& operator=(const SameBitsStep&) = delete;

  // One optimizer step over the K micro-batches of step steps_done();
  // returns the mean loss over them (the same value on every rank).
  double step(const MicroBatchLoss& loss);

  int64_t steps_done() const { return steps_done_; }
  // After loading a checkpoint: the step the run continues from.
  void set_steps_done(int64_t steps) { steps_done_ = steps; }
  // The micro-batches this rank runs: [first, first + count).
  int64_t first_micro_batch() const;
  int64_t local_micro_batches() const;

 private:
  ::torch::nn::Module& model_;
  ::torch::optim::Optimizer& optimizer_;
  SameBitsOptions options_;
  int64_t steps_done_ = 0;
};

// The world sizes SameBitsStep accepts for K micro-batches: K's divisors.
std::vector<int64_t> same_bits_world_sizes(int64_t micro_batches);

// FNV-1a 64 over the names, dtypes, shapes and bytes of every parameter and
// buffer, and of the optimizer's per-parameter state (SGD, Adam, AdamW;
// another optimizer: InvalidArgument). Local; equal states give equal hashes.
uint64_t state_hash(const ::torch::nn::Module& model, const ::torch::optim::Optimizer& optimizer);
std::string state_hash_hex(const ::torch::nn::Module& model,
                           const ::torch::optim::Optimizer& optimizer);

}  // namespace lockstep::torch
