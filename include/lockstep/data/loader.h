// The loader: lockstep's input pipeline, without LibTorch (lockstep/data/torch.h
// wraps its batches in tensors). Named apart from pipeline parallelism
// (lockstep/parallel/pipeline.h).
//
//   source (record shards, HDF5 or LMDB: source.h) -> plan_epoch (rank's
//   segments) -> interleave K segments
//   (concurrent sequential block reads) -> shuffle buffer (S) -> batches of
//   B records -> parallel decode + augment on T threads -> in-order
//   prefetch queue of P batches -> next()
//
// Determinism: the batch sequence is a function of (options, epoch) only.
// Threads decode whole batches but batches are emitted in sequence order, and
// each sample's augmentation is seeded by (seed, epoch, shard, record), so the
// thread count and timing never change the output.
//
// Errors: a bad record (see bad_record.h) raises BadRecord from next() when
// the consumer reaches the batch that holds it (kThrow), or is dropped from
// its batch and counted (kSkip: that batch is shorter; the number of batches
// never changes, so ranks stay in step). I/O errors are raised the same way.
//
// Thread-safety: one consumer thread calls start_epoch/next; the object owns
// its background threads and joins them in start_epoch and the destructor.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/data/assign.h"
#include "lockstep/data/bad_record.h"
#include "lockstep/data/record_index.h"
#include "lockstep/data/sample.h"
#include "lockstep/data/source.h"

namespace lockstep::data {

struct LoaderOptions {
  // The data set, first one set wins: `index` (record shards), `source`
  // (several HDF5 files or LMDB folders, HDF5 dataset names), `index_path`
  // (one <name>.index.json, HDF5 file or LMDB folder).
  std::string index_path;
  RecordIndex index;
  SourceSpec source;
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;  // must be equal on all ranks
  Assignment assignment = Assignment::kPartition;
  Remainder remainder = Remainder::kPad;
  uint64_t block_records = 256;  // unit of sequential reads and of the global shuffle;
                                 // rounded up to a multiple of HDF5 chunk rows
  size_t batch_size = 32;
  bool drop_last_batch = false;  // else the last batch may be smaller
  size_t interleave = 4;         // K: segments read concurrently
  size_t shuffle_buffer = 8192;  // S: 0 or 1 keeps the interleaved order
  size_t threads = 4;            // T: decode threads
  size_t prefetch = 8;           // P: batches decoded ahead of the consumer
  bool cache = false;            // keep raw records in memory after reading them once
  BadDataPolicy bad_data = BadDataPolicy::kThrow;
  DecodeOptions decode;
};

struct HostBatch {
  uint64_t index = 0;          // batch number within the epoch
  std::vector<int64_t> shape;  // {n, C, H, W}; n < batch_size for a last or skip-shortened batch
  std::vector<float> data;
  std::vector<int64_t> labels;  // n
  size_t size() const { return labels.size(); }
};

struct SkipReport {
  uint64_t skipped = 0;
  std::vector<std::string> first_reasons;  // up to kMaxReasons, in stream order
  static constexpr size_t kMaxReasons = 5;
};

class Loader {
 public:
  // Loads the index and opens the shards; throws Error for a bad option or file.
  explicit Loader(LoaderOptions options);
  ~Loader();
  Loader(Loader&&) noexcept;
  Loader& operator=(Loader&&) noexcept;

  // Starts (or restarts) reading `epoch`; any running epoch is stopped first.
  void start_epoch(uint64_t epoch);
  // The next batch, nullopt after the last one of the epoch. Throws BadRecord
  // (kThrow) or Error (I/O) at the batch where the problem is.
  std::optional<HostBatch> next();

  uint64_t records_per_epoch() const;  // for this rank; equal on all ranks
  uint64_t batches_per_epoch() const;  // equal on all ranks
  const SampleSource& source() const;
  // Records skipped so far in the current epoch (kSkip); logged at its end.
  SkipReport skip_report() const;
  const LoaderOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Fluent construction: Loader p = LoaderBuilder(path).batch(64).shuffle(10000)
//                                       .threads(4).rank(r, world).seed(1).build();
class LoaderBuilder {
 public:
  // A <name>.index.json, an HDF5 file or an LMDB folder.
  explicit LoaderBuilder(std::string path) { options_.index_path = std::move(path); }
  explicit LoaderBuilder(LoaderOptions options) : options_(std::move(options)) {}
  LoaderBuilder& source(SourceSpec spec);
  LoaderBuilder& rank(int rank, int world_size);
  LoaderBuilder& seed(uint64_t seed);
  LoaderBuilder& assignment(Assignment a, Remainder r = Remainder::kPad);
  LoaderBuilder& batch(size_t size, bool drop_last = false);
  LoaderBuilder& block_records(uint64_t records);
  LoaderBuilder& interleave(size_t segments);
  LoaderBuilder& shuffle(size_t buffer);
  LoaderBuilder& threads(size_t n);
  LoaderBuilder& prefetch(size_t batches);
  LoaderBuilder& cache(bool on = true);
  LoaderBuilder& bad_data(BadDataPolicy policy);
  LoaderBuilder& decode(DecodeOptions d);
  const LoaderOptions& options() const { return options_; }
  Loader build() const { return Loader(options_); }

 private:
  LoaderOptions options_;
};

}  // namespace lockstep::data
