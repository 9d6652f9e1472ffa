// Internal: the read side of the pipeline. BlockReader fetches the bytes of
// a segment (optionally from/into an in-memory cache); RecordSource
// interleaves K segments and yields their records in a fixed order.
#pragma once

#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lockstep/data/assign.h"
#include "lockstep/data/record_table.h"

namespace lockstep::data {

// One record as located by the index; the frame is checked later, on a
// decode thread. `bytes` is shared with the other records of its segment.
struct RawRecord {
  std::shared_ptr<const std::string> bytes;
  size_t begin = 0;  // frame bytes are (*bytes)[begin, end)
  size_t end = 0;
  uint32_t shard = 0;
  uint64_t record = 0;  // index inside the shard
  uint64_t offset = 0;  // byte offset inside the shard
};

struct SegmentBytes {
  std::shared_ptr<const std::string> bytes;
  uint64_t base = 0;  // shard offset of bytes[0]
};

// Thread-safe: reads run concurrently on async tasks.
class BlockReader {
 public:
  BlockReader(const RecordTable& table, uint64_t block_records, bool cache)
      : table_(table), block_records_(block_records), cache_(cache) {}
  SegmentBytes read(const Segment& segment);

 private:
  const RecordTable& table_;
  uint64_t block_records_;
  bool cache_;
  std::mutex mu_;
  std::map<std::pair<uint32_t, uint64_t>, SegmentBytes> blocks_;  // (shard, block) -> bytes
};

// Single-threaded (the pipeline's producer); its reads run on async tasks, up
// to `interleave` segments ahead.
class RecordSource {
 public:
  RecordSource(const RecordTable& table, BlockReader& reader, std::vector<Segment> plan,
               size_t interleave);
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

  const RecordTable& table_;
  BlockReader& reader_;
  std::vector<Segment> plan_;
  size_t interleave_;
  size_t next_segment_ = 0;                         // next plan entry to become a slot
  std::deque<std::shared_future<SegmentBytes>> ahead_;  // reads of plan_[next_segment_...]
  std::vector<Slot> slots_;
  size_t cursor_ = 0;
};

}  // namespace lockstep::data
