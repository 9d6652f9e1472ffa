// Fashion-MNIST as in-memory tensors, normalised once at load time (the whole
// training set is 188 MB of f32, so a batch is a cheap index_select).
//
// Sources: the IDX files of Debian's dataset-fashion-mnist, or what
// `lockstep convert idx` wrote: record shards, HDF5 or LMDB. Those are read
// through the data loader (lockstep/data/loader.h), so every record is
// checked — against the index for shards (count, offsets, CRCs), against the
// Fletcher-32 chunk checksums for HDF5 — and a shard cut short, even at a
// record boundary, is an error naming file and record (BadDataPolicy::kThrow)
// or is skipped and reported (kSkip), never silently trained on less data.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "lockstep/data/bad_record.h"
#include "lockstep/data/idx.h"  // kFashionMnistDir

namespace lockstep::examples {

struct FashionSplit {
  ::torch::Tensor images;  // [N, 1, 28, 28] f32, normalised
  ::torch::Tensor labels;  // [N] i64
  int64_t size() const { return labels.size(0); }
};

// Mean and standard deviation of the Fashion-MNIST training pixels in [0, 1].
inline constexpr double kFashionMean = 0.2860;
inline constexpr double kFashionStd = 0.3530;

struct FashionLoadOptions {
  int64_t limit = 0;  // > 0: keep the first `limit` samples (in the source's order)
  data::BadDataPolicy bad_data = data::BadDataPolicy::kThrow;  // shards only
};

// What load_fashion_split read, for the caller to report.
struct FashionLoadReport {
  std::string source;                      // "idx", "records", "hdf5" or "lmdb"
  uint64_t expected = 0;                   // records the index (or IDX header) lists
  uint64_t skipped = 0;                    // bad records dropped under kSkip
  std::vector<std::string> first_reasons;  // of the skipped records
};

// `dir` holds the split as record shards (<split>.index.json), HDF5
// (<split>.h5, <split>-*.h5), LMDB (<split>.lmdb) or IDX files.
// Throws lockstep::Error (naming the Debian package dataset-fashion-mnist
// when the folder is missing) and data::BadRecord for a bad record under
// kThrow. Shards are read in the loader's order for seed 0 (a fixed
// permutation of blocks), so `limit` takes a deterministic mixed subset.
FashionSplit load_fashion_split(const std::string& dir, const std::string& split,
                                FashionLoadOptions options = {},
                                FashionLoadReport* report = nullptr);

// The old signature, for programs that need no skip policy.
inline FashionSplit load_fashion_split(const std::string& dir, const std::string& split,
                                       int64_t limit) {
  return load_fashion_split(dir, split, FashionLoadOptions{.limit = limit});
}

}  // namespace lockstep::examples
