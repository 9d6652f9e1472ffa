// Internal: the read side of the loader, for any SampleSource (records,
// HDF5, LMDB). BlockReader fetches a segment (optionally from/into an
// in-memory cache); RecordSource interleaves K segments and yields their
// records in a fixed order.
#pragma once

#include <deque>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/base/mutex.h"
#include "lockstep/data/assign.h"
#include "lockstep/data/source.h"

namespace lockstep::data {

// One record of a segment that was read; it is checked and decoded later, on
// a decode thread. `data` is shared with the other records of its segment.
struct RawRecord {
  std::shared_ptr<const SegmentData> data;
  size_t at = 0;  // position in data (which may be a whole cached block)
  uint32_t shard() const { return data->segment.shard; }
  uint64_t record() const { return data->segment.first + at; }  // index inside the shard
};

using SegmentBytes = std::shared_ptr<const SegmentData>;

// Thread-safe: reads run concurrently on async tasks.
class BlockReader {
 public:
  BlockReader(const SampleSource& source, uint64_t block_records, bool cache)
      : source_(source), block_records_(block_records), cache_(cache) {}
  SegmentBytes read(const Segment& segment);

 private:
  const SampleSource& source_;
  uint64_t block_records_;
  bool cache_;
  Mutex mu_;
  // (shard, block) -> bytes
  std::map<std::pair<uint32_t, uint64_t>, SegmentBytes> blocks_ LOCKSTEP_GUARDED_BY(mu_);
};

// Single-threaded (the loader's producer); its reads run on async tasks, up
// to `interleave` segments ahead.
class RecordSource {
 public:
  RecordSource(BlockReader& reader, std::vector<Segment> plan, size_t interleave);
  // False after the last record. Rethrows read errors.
  bool next(RawRecord* out);

 private:
  struct Slot {
    Segment segment;
    std::shared_future<SegmentBytes> bytes;
    uint64_t done = 0;
  };
  void fill_slots();
  std::shared_future<SegmentBytes> read_async(const Segment& segment);

  BlockReader& reader_;
  std::vector<Segment> plan_;
  size_t interleave_;
  size_t next_segment_ = 0;                             // next plan entry to become a slot
  std::deque<std::shared_future<SegmentBytes>> ahead_;  // reads of plan_[next_segment_...]
  std::vector<Slot> slots_;
  size_t cursor_ = 0;
};

}  // namespace lockstep::data
