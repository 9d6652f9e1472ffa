#include "data/loader/batch_decode.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "data/rng.h"

namespace lockstep::data {
namespace {

constexpr uint64_t kAugmentStream = 0x61756775ull;  // "augu"

// Checks and decodes the sample; BadRecord on a bad record.
void decode_one(const RawRecord& r, const LoaderOptions& options, const SampleSource& source,
                uint64_t epoch, Sample* sample) {
  source.decode(*r.data, r.at, options.decode,
                sample_seed(options.seed, epoch, r.shard(), r.record()), sample);
}

void append(HostBatch& batch, Sample& sample, const RawRecord& r, const SampleSource& source) {
  if (batch.labels.empty()) {
    batch.shape = {0};
    batch.shape.insert(batch.shape.end(), sample.shape.begin(), sample.shape.end());
  } else if (!std::equal(sample.shape.begin(), sample.shape.end(), batch.shape.begin() + 1,
                         batch.shape.end())) {
    throw Error(fmt::format(
        "{}: record {} decodes to shape [{}] but batch {} holds [{}]: images of different "
        "sizes need DecodeOptions crop_height/crop_width",
        source.shard_name(r.shard()), r.record(), fmt::join(sample.shape, ", "), batch.index,
        fmt::join(batch.shape.begin() + 1, batch.shape.end(), ", ")));
  }
  batch.data.insert(batch.data.end(), sample.data.begin(), sample.data.end());
  batch.labels.push_back(sample.label);
  batch.shape[0] = static_cast<int64_t>(batch.labels.size());
}

}  // namespace

uint64_t sample_seed(uint64_t seed, uint64_t epoch, uint32_t shard, uint64_t record) {
  return mix_seed({seed, epoch, kAugmentStream, shard, record});
}

void merge_skips(SkipReport& total, const SkipReport& more) {
  total.skipped += more.skipped;
  for (const auto& reason : more.first_reasons)
    if (total.first_reasons.size() < SkipReport::kMaxReasons) total.first_reasons.push_back(reason);
}

BatchResult decode_batch(const BatchJob& job, const LoaderOptions& options,
                         const SampleSource& source, uint64_t epoch) {
  BatchResult result;
  HostBatch batch;
  batch.index = job.seq;
  batch.shape = {0};
  Sample sample;
  try {
    for (const RawRecord& r : job.records) {
      try {
        decode_one(r, options, source, epoch, &sample);
      } catch (const BadRecord& e) {
        if (options.bad_data == BadDataPolicy::kThrow) throw;
        merge_skips(result.skips, SkipReport{1, {e.what()}});
        continue;
      }
      if (batch.labels.empty()) batch.data.reserve(sample.data.size() * job.records.size());
      append(batch, sample, r, source);
    }
  } catch (...) {
    result.error = std::current_exception();
    return result;
  }
  result.batch = std::move(batch);
  return result;
}

}  // namespace lockstep::data
