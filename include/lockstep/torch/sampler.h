// DistributedSampler: which dataset indices each rank visits in each epoch.
// Needs no LibTorch; deterministic across platforms (own shuffle on
// std::mt19937_64, not std::shuffle).
//
// Scheme kPartition (default, the usual one): every epoch all ranks shuffle
// the whole index range with the shared seed (seed, epoch), then rank r takes
// positions r, r+size, r+2*size... Every rank gets exactly num_samples()
// indices, hence the same number of batches, so no rank waits for a
// collective the others never issue:
//   - pad (default): ceil(N/size) each; the shortfall is filled by wrapping
//     around to the start of the shuffled order (a few samples seen twice);
//   - drop_last: floor(N/size) each; the N % size last shuffled indices are
//     skipped this epoch (different ones each epoch).
// Ranks' indices are disjoint (apart from the padding) and cover the dataset.
//
// Scheme kIndependent: every rank draws its own random permutation of the
// whole dataset from a per-rank stream (seed, epoch, rank) and takes
// num_samples() of it. Ranks may overlap within an epoch; useful when the
// data is replicated and partitioning is not wanted (and for elastic jobs).
//
// State (epoch, position within the epoch) can be saved and restored so a
// resumed job continues with the next unseen batch.
//
// Resuming in a world of another size (elastic jobs): global_position() is
// how many entries of the epoch's shuffled order all ranks together have
// consumed. resume(epoch, global_position, rank, size) rebuilds that order,
// skips those entries and partitions the remainder among the new ranks (rank
// r takes remaining positions r, r+size, ...), with the pad/drop_last rule
// applied to the remainder, so every rank again gets the same count and,
// without padding, every index of the epoch is visited exactly once across
// the old and the new world. offset (in SamplerState) is where this world's
// partition starts in the shuffled order; set_epoch() resets it to 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::torch {

enum class SamplingScheme { kPartition, kIndependent };

struct DistributedSamplerOptions {
  int64_t dataset_size = 0;
  int rank = 0;
  int size = 1;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // kPartition: drop instead of pad
  SamplingScheme scheme = SamplingScheme::kPartition;
};

struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;  // indices of this epoch already handed out by this rank
  int64_t offset = 0;    // kPartition: entries of the shuffled order before this partition
};

// No locking: one thread uses a sampler (each rank owns its own).
class DistributedSampler {
 public:
  // Throws InvalidArgument for rank/size/dataset_size out of range.
  explicit DistributedSampler(DistributedSamplerOptions options);

  // Starts epoch `epoch` from its beginning (reshuffles).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return state_.epoch; }

  // Indices per rank in this epoch (the same on every rank). After resume()
  // with a nonzero global position: the share of the remainder of the epoch.
  int64_t num_samples() const { return num_samples_; }
  // Batches per epoch for batch_size (the last one partial unless drop_last_batch).
  int64_t num_batches(int64_t batch_size, bool drop_last_batch = false) const;

  // All of this rank's indices for the current epoch.
  const std::vector<int64_t>& indices() const { return indices_; }
  // The next up to batch_size indices of this epoch; empty at its end.
  std::vector<int64_t> next_batch(int64_t batch_size);

  SamplerState state() const { return state_; }
  // Same rank and size as when `state` was taken (otherwise use resume()).
  void restore(const SamplerState& state);
  // Text for checkpoints (Note [Sampler state text] in sampler.cc): epoch,
  // position, offset, world size, global position and dataset size. load()
  // in a world of the saved size restores the state as it was; at another
  // size it resume()s at the saved global position as this sampler's rank of
  // its size, so the job goes on with the same global order (kPartition) —
  // it throws InvalidArgument for another dataset size. Older texts
  // ("epoch position [offset]") restore as they are.
  std::string save() const;
  void load(const std::string& text);

  // Samples of this epoch consumed by all ranks together, assuming every
  // rank is at the same position (true at a step boundary): kPartition
  // offset + position * size, capped at dataset_size (padding is not
  // counted); kIndependent position * size, capped likewise.
  int64_t global_position() const;
  // Continues epoch `epoch` after `global_position` samples, as rank `rank`
  // of `size` (which become this sampler's rank and size). kPartition: see
  // the top of this file; resume(e, 0, r, s) equals a fresh sampler of rank
  // r of s at set_epoch(e). kIndependent: there is no shared order to skip
  // into, so each rank redraws its own (seed, epoch, new rank) permutation
  // and starts at position ceil(global_position / size), keeping the share
  // of the epoch already done. Throws InvalidArgument naming the field for
  // epoch < 0, global_position outside [0, dataset_size], rank/size out of
  // range, or drop_last with dataset_size < size.
  void resume(int64_t epoch, int64_t global_position, int rank, int size);

  const DistributedSamplerOptions& options() const { return options_; }

 private:
  void build_epoch();
  // Indices per rank when `remaining` entries of the shuffled order are left.
  int64_t share_of(int64_t remaining) const;

  DistributedSamplerOptions options_;
  int64_t num_samples_ = 0;
  SamplerState state_;
  std::vector<int64_t> indices_;
};

}  // namespace lockstep::torch
