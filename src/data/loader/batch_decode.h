// Internal: turns a batch of located records into a HostBatch on a decode
// thread. Pure apart from reading its arguments: safe on any thread.
#pragma once

#include <exception>
#include <optional>
#include <vector>

#include "lockstep/data/loader.h"
#include "data/loader/record_source.h"

namespace lockstep::data {

struct BatchJob {
  uint64_t seq = 0;
  std::vector<RawRecord> records;
};

struct BatchResult {
  std::optional<HostBatch> batch;
  std::exception_ptr error;  // set instead of batch on failure
  SkipReport skips;          // kSkip: what this batch dropped
};

// Per-sample augmentation seed: depends on the record, not on the thread or
// the position in the stream.
uint64_t sample_seed(uint64_t seed, uint64_t epoch, uint32_t shard, uint64_t record);

BatchResult decode_batch(const BatchJob& job, const LoaderOptions& options,
                         const SampleSource& source, uint64_t epoch);

// Adds `more` to `total`, keeping the first kMaxReasons reasons.
void merge_skips(SkipReport& total, const SkipReport& more);

}  // namespace lockstep::data
