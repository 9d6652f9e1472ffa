#include "lockstep/data/loader.h"

#include <fmt/format.h>

#include "lockstep/base/log.h"
#include "data/loader/epoch_run.h"
#include "data/format/source_formats.h"

namespace lockstep::data {
namespace {

void validate(const LoaderOptions& o) {
  if (o.batch_size == 0) throw InvalidArgument("LoaderOptions.batch_size must be >= 1");
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    throw InvalidArgument(
        fmt::format("LoaderOptions: rank {} outside world of {}", o.rank, o.world_size));
  if (o.block_records == 0) throw InvalidArgument("LoaderOptions.block_records must be >= 1");
}

std::unique_ptr<SampleSource> open_data(const LoaderOptions& o) {
  if (!o.index.shards.empty()) return open_record_source(o.index);
  if (!o.source.paths.empty()) return open_source(o.source);
  if (o.index_path.empty())
    throw InvalidArgument(
        "LoaderOptions: set index_path (a <name>.index.json, HDF5 file or LMDB folder), "
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

struct Loader::Impl {
  explicit Impl(LoaderOptions o)
      : options((validate(o), std::move(o))),
        source(open_data(options)),
        block_records(source->align_block(options.block_records)),
        reader(*source, block_records, options.cache) {
    per_rank = records_per_rank(source->total_records(), options.world_size, options.remainder);
    batches = options.drop_last_batch ? per_rank / options.batch_size
                                      : (per_rank + options.batch_size - 1) / options.batch_size;
  }

  LoaderOptions options;
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

Loader::Loader(LoaderOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Loader::~Loader() = default;
Loader::Loader(Loader&&) noexcept = default;
Loader& Loader::operator=(Loader&&) noexcept = default;

void Loader::start_epoch(uint64_t epoch) {
  Impl& p = *impl_;
  p.run.reset();
  p.epoch = epoch;
  p.taken = 0;
  p.skips = {};
  p.failed = nullptr;
  if (p.batches > 0)
    p.run = std::make_unique<EpochRun>(p.options, *p.source, p.reader, p.block_records, epoch,
                                       p.batches);
}

std::optional<HostBatch> Loader::next() {
  Impl& p = *impl_;
  if (p.failed) std::rethrow_exception(p.failed);
  if (p.taken == p.batches) return std::nullopt;
  if (!p.run) throw InvalidArgument("Loader::next() before start_epoch()");
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

uint64_t Loader::records_per_epoch() const { return impl_->per_rank; }
uint64_t Loader::batches_per_epoch() const { return impl_->batches; }
SkipReport Loader::skip_report() const { return impl_->skips; }
const SampleSource& Loader::source() const { return *impl_->source; }
const LoaderOptions& Loader::options() const { return impl_->options; }

LoaderBuilder& LoaderBuilder::source(SourceSpec spec) {
  options_.source = std::move(spec);
  return *this;
}
LoaderBuilder& LoaderBuilder::rank(int rank, int world_size) {
  options_.rank = rank;
  options_.world_size = world_size;
  return *this;
}
LoaderBuilder& LoaderBuilder::seed(uint64_t seed) {
  options_.seed = seed;
  return *this;
}
LoaderBuilder& LoaderBuilder::assignment(Assignment a, Remainder r) {
  options_.assignment = a;
  options_.remainder = r;
  return *this;
}
LoaderBuilder& LoaderBuilder::batch(size_t size, bool drop_last) {
  options_.batch_size = size;
  options_.drop_last_batch = drop_last;
  return *this;
}
LoaderBuilder& LoaderBuilder::block_records(uint64_t records) {
  options_.block_records = records;
  return *this;
}
LoaderBuilder& LoaderBuilder::interleave(size_t segments) {
  options_.interleave = segments;
  return *this;
}
LoaderBuilder& LoaderBuilder::shuffle(size_t buffer) {
  options_.shuffle_buffer = buffer;
  return *this;
}
LoaderBuilder& LoaderBuilder::threads(size_t n) {
  options_.threads = n;
  return *this;
}
LoaderBuilder& LoaderBuilder::prefetch(size_t batches) {
  options_.prefetch = batches;
  return *this;
}
LoaderBuilder& LoaderBuilder::cache(bool on) {
  options_.cache = on;
  return *this;
}
LoaderBuilder& LoaderBuilder::bad_data(BadDataPolicy policy) {
  options_.bad_data = policy;
  return *this;
}
LoaderBuilder& LoaderBuilder::decode(DecodeOptions d) {
  options_.decode = std::move(d);
  return *this;
}

}  // namespace lockstep::data
