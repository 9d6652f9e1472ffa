#include "lockstep/data/pipeline.h"

#include <fmt/format.h>

#include "lockstep/base/log.h"
#include "data/loader/epoch_run.h"
#include "data/format/source_formats.h"

namespace lockstep::data {
namespace {

void validate(const PipelineOptions& o) {
  if (o.batch_size == 0) throw InvalidArgument("PipelineOptions.batch_size must be >= 1");
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    throw InvalidArgument(fmt::format("PipelineOptions: rank {} outside world of {}", o.rank,
                                      o.world_size));
  if (o.block_records == 0) throw InvalidArgument("PipelineOptions.block_records must be >= 1");
}

std::unique_ptr<SampleSource> open_data(const PipelineOptions& o) {
  if (!o.index.shards.empty()) return open_record_source(o.index);
  if (!o.source.paths.empty()) return open_source(o.source);
  if (o.index_path.empty())
    throw InvalidArgument(
        "PipelineOptions: set index_path (a <name>.index.json, HDF5 file or LMDB folder), "
        "source or index");
  SourceSpec spec = o.source;
  spec.paths = {o.index_path};
  return open_source(spec);
}

void log_skips(uint64_t epoch, const SkipReport& report) {
  if (report.skipped == 0) return;
  log(LogLevel::kWarning, "input pipeline epoch {}: skipped {} bad record(s); first: {}", epoch,
      report.skipped, fmt::join(report.first_reasons, " | "));
}

}  // namespace

struct Pipeline::Impl {
  explicit Impl(PipelineOptions o)
      : options((validate(o), std::move(o))),
        source(open_data(options)),
        block_records(source->align_block(options.block_records)),
        reader(*source, block_records, options.cache) {
    per_rank = records_per_rank(source->total_records(), options.world_size, options.remainder);
    batches = options.drop_last_batch ? per_rank / options.batch_size
                                      : (per_rank + options.batch_size - 1) / options.batch_size;
  }

  PipelineOptions options;
  std::unique_ptr<SampleSource> source;
  uint64_t block_records;
  BlockReader reader;
  uint64_t per_rank = 0;
  uint64_t batches = 0;
  std::unique_ptr<EpochRun> run;  // declared last: stopped before what it reads
  uint64_t epoch = 0;
  uint64_t taken = 0;
  SkipReport skips;
  std::exception_ptr failed;
};

Pipeline::Pipeline(PipelineOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Pipeline::~Pipeline() = default;
Pipeline::Pipeline(Pipeline&&) noexcept = default;
Pipeline& Pipeline::operator=(Pipeline&&) noexcept = default;

void Pipeline::start_epoch(uint64_t epoch) {
  Impl& p = *impl_;
  p.run.reset();
  p.epoch = epoch;
  p.taken = 0;
  p.skips = {};
  p.failed = nullptr;
  if (p.batches > 0) p.run = std::make_unique<EpochRun>(p.options, *p.source, p.reader, p.block_records,
                                                     epoch, p.batches);
}

std::optional<HostBatch> Pipeline::next() {
  Impl& p = *impl_;
  if (p.failed) std::rethrow_exception(p.failed);
  if (p.taken == p.batches) return std::nullopt;
  if (!p.run) throw InvalidArgument("Pipeline::next() before start_epoch()");
  BatchResult result = p.run->take();
  ++p.taken;
  merge_skips(p.skips, result.skips);
  if (p.taken == p.batches) {
    log_skips(p.epoch, p.skips);
    p.run.reset();  // the epoch is over: free its threads
  }
  if (result.error) {
    p.failed = result.error;  // the epoch cannot go on past a missing batch
    p.run.reset();
    std::rethrow_exception(result.error);
  }
  return std::move(result.batch);
}

uint64_t Pipeline::records_per_epoch() const { return impl_->per_rank; }
uint64_t Pipeline::batches_per_epoch() const { return impl_->batches; }
SkipReport Pipeline::skip_report() const { return impl_->skips; }
const SampleSource& Pipeline::source() const { return *impl_->source; }
const PipelineOptions& Pipeline::options() const { return impl_->options; }

PipelineBuilder& PipelineBuilder::source(SourceSpec spec) {
  options_.source = std::move(spec);
  return *this;
}
PipelineBuilder& PipelineBuilder::rank(int rank, int world_size) {
  options_.rank = rank;
  options_.world_size = world_size;
  return *this;
}
PipelineBuilder& PipelineBuilder::seed(uint64_t seed) {
  options_.seed = seed;
  return *this;
}
PipelineBuilder& PipelineBuilder::assignment(Assignment a, Remainder r) {
  options_.assignment = a;
  options_.remainder = r;
  return *this;
}
PipelineBuilder& PipelineBuilder::batch(size_t size, bool drop_last) {
  options_.batch_size = size;
  options_.drop_last_batch = drop_last;
  return *this;
}
PipelineBuilder& PipelineBuilder::block_records(uint64_t records) {
  options_.block_records = records;
  return *this;
}
PipelineBuilder& PipelineBuilder::interleave(size_t segments) {
  options_.interleave = segments;
  return *this;
}
PipelineBuilder& PipelineBuilder::shuffle(size_t buffer) {
  options_.shuffle_buffer = buffer;
  return *this;
}
PipelineBuilder& PipelineBuilder::threads(size_t n) {
  options_.threads = n;
  return *this;
}
PipelineBuilder& PipelineBuilder::prefetch(size_t batches) {
  options_.prefetch = batches;
  return *this;
}
PipelineBuilder& PipelineBuilder::cache(bool on) {
  options_.cache = on;
  return *this;
}
PipelineBuilder& PipelineBuilder::bad_data(BadDataPolicy policy) {
  options_.bad_data = policy;
  return *this;
}
PipelineBuilder& PipelineBuilder::decode(DecodeOptions d) {
  options_.decode = std::move(d);
  return *this;
}

}  // namespace lockstep::data
