#include "data/loader/epoch_run.h"

#include <algorithm>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "data/loader/shuffle_buffer.h"

namespace lockstep::data {
namespace {
constexpr uint64_t kShuffleStream = 0x73687566ull;  // "shuf"
}

EpochRun::EpochRun(const LoaderOptions& options, const SampleSource& source, BlockReader& reader,
                   uint64_t block_records, uint64_t epoch, uint64_t batches)
    : options_(options),
      source_(source),
      reader_(reader),
      block_records_(block_records),
      epoch_(epoch),
      batches_(batches),
      capacity_(std::max<uint64_t>(
          {uint64_t{1}, uint64_t(options.prefetch), uint64_t(options.threads)})) {
  threads_.emplace_back([this] { produce(); });
  for (size_t i = 0; i < std::max<size_t>(1, options.threads); ++i)
    threads_.emplace_back([this] { decode_loop(); });
}

EpochRun::~EpochRun() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  space_.notify_all();
  work_.notify_all();
  for (auto& t : threads_) t.join();
}

bool EpochRun::push_job(BatchJob job) {
  MutexLock lock(mu_);
  while (!stop_ && produced_ - taken_ >= capacity_) lock.wait(space_);
  if (stop_) return false;
  ++produced_;
  jobs_.push_back(std::move(job));
  work_.notify_one();
  return true;
}

void EpochRun::produce_batches() {
  EpochPlanOptions plan{options_.assignment, options_.remainder,  options_.seed, epoch_,
                        options_.rank,       options_.world_size, block_records_};
  RecordSource source(reader_, plan_epoch(source_.shard_records(), plan), options_.interleave);
  ShuffleBuffer<RawRecord> shuffle(
      options_.shuffle_buffer,
      mix_seed({options_.seed, epoch_, kShuffleStream, static_cast<uint64_t>(options_.rank)}));
  BatchJob job;
  uint64_t seq = 0;
  // Returns false once every batch is out (drop_last_batch ends early) or on stop.
  auto emit = [&](RawRecord record) {
    job.records.push_back(std::move(record));
    if (job.records.size() < options_.batch_size) return true;
    job.seq = seq++;
    return push_job(std::exchange(job, {})) && seq < batches_;
  };
  RawRecord record;
  bool more = seq < batches_;
  while (more && source.next(&record))
    if (auto out = shuffle.push(std::move(record))) more = emit(std::move(*out));
  while (more)
    if (auto out = shuffle.pop())
      more = emit(std::move(*out));
    else
      break;
  if (more && !job.records.empty()) {
    job.seq = seq++;
    push_job(std::move(job));
  }
}

void EpochRun::produce() {
  try {
    produce_batches();
  } catch (...) {
    uint64_t failed_seq = 0;
    {
      MutexLock lock(mu_);
      failed_seq = produced_;
    }
    deliver(failed_seq, BatchResult{std::nullopt, std::current_exception(), {}});
  }
  MutexLock lock(mu_);
  producer_finished_ = true;
  done_.notify_all();
}

void EpochRun::decode_loop() {
  for (;;) {
    BatchJob job;
    {
      MutexLock lock(mu_);
      while (!stop_ && jobs_.empty()) lock.wait(work_);
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    deliver(job.seq, decode_batch(job, options_, source_, epoch_));
  }
}

void EpochRun::deliver(uint64_t seq, BatchResult result) {
  MutexLock lock(mu_);
  ready_.emplace(seq, std::move(result));
  done_.notify_all();
}

BatchResult EpochRun::take() {
  MutexLock lock(mu_);
  while (!ready_.count(taken_) && !(producer_finished_ && jobs_.empty() && produced_ <= taken_))
    lock.wait(done_);
  auto it = ready_.find(taken_);
  if (it == ready_.end()) {
    // The producer ended without making batch taken_: the plan promised more
    // records than the shards gave. Never block forever on it.
    return {std::nullopt,
            std::make_exception_ptr(Error(fmt::format(
                "input pipeline made only {} of {} batches in epoch {}: the index and shards "
                "disagree; re-create the index",
                produced_, batches_, epoch_))),
            {}};
  }
  BatchResult result = std::move(it->second);
  ready_.erase(it);
  ++taken_;
  space_.notify_one();
  return result;
}

}  // namespace lockstep::data
