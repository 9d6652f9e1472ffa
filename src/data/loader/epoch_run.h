// Internal: the threads of one epoch. A producer thread reads, interleaves,
// shuffles and cuts batches; T decode threads turn them into HostBatches;
// take() hands them out strictly in sequence order. At most `capacity`
// batches are in flight (queued, decoding or decoded but not taken), which
// bounds memory. Destruction stops and joins every thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <thread>
#include <vector>

#include "data/loader/batch_decode.h"
#include "lockstep/base/mutex.h"
#include "data/loader/record_source.h"

namespace lockstep::data {

class EpochRun {
 public:
  EpochRun(const LoaderOptions& options, const SampleSource& source, BlockReader& reader,
           uint64_t block_records, uint64_t epoch, uint64_t batches);
  ~EpochRun();
  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;

  // The next batch in order (blocks until decoded); call at most `batches` times.
  BatchResult take();

 private:
  void produce();
  void produce_batches();
  bool push_job(BatchJob job);  // false when stopping
  void decode_loop();
  void deliver(uint64_t seq, BatchResult result);

  const LoaderOptions& options_;
  const SampleSource& source_;
  BlockReader& reader_;
  const uint64_t block_records_;
  const uint64_t epoch_;
  const uint64_t batches_;
  const uint64_t capacity_;

  Mutex mu_;
  std::condition_variable space_;  // producer waits for room
  std::condition_variable work_;   // decoders wait for jobs
  std::condition_variable done_;   // consumer waits for its batch
  std::deque<BatchJob> jobs_ LOCKSTEP_GUARDED_BY(mu_);
  std::map<uint64_t, BatchResult> ready_ LOCKSTEP_GUARDED_BY(mu_);
  uint64_t produced_ LOCKSTEP_GUARDED_BY(mu_) = 0;
  uint64_t taken_ LOCKSTEP_GUARDED_BY(mu_) = 0;
  bool producer_finished_ LOCKSTEP_GUARDED_BY(mu_) = false;
  bool stop_ LOCKSTEP_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // made by the constructor, joined by the destructor
};

}  // namespace lockstep::data
