#include "data/loader/record_source.h"

namespace lockstep::data {

SegmentBytes BlockReader::read(const Segment& segment) {
  if (!cache_) return std::make_shared<const SegmentData>(source_.read(segment));
  // Cached reads fetch whole blocks, so later epochs (which cut blocks at
  // other rank boundaries) find them.
  uint64_t block = segment.first / block_records_;
  auto key = std::make_pair(segment.shard, block);
  {
    MutexLock lock(mu_);
    if (auto it = blocks_.find(key); it != blocks_.end()) return it->second;
  }
  uint64_t first = block * block_records_;
  uint64_t count = std::min(block_records_, source_.records(segment.shard) - first);
  auto bytes = std::make_shared<const SegmentData>(source_.read({segment.shard, first, count}));
  MutexLock lock(mu_);
  blocks_.emplace(key, bytes);
  return bytes;
}

RecordSource::RecordSource(BlockReader& reader, std::vector<Segment> plan, size_t interleave)
    : reader_(reader), plan_(std::move(plan)), interleave_(std::max<size_t>(1, interleave)) {
  fill_slots();
}

std::shared_future<SegmentBytes> RecordSource::read_async(const Segment& segment) {
  return std::async(std::launch::async, [this, segment] { return reader_.read(segment); }).share();
}

void RecordSource::fill_slots() {
  // Keep `interleave_` reads in flight beyond the active slots.
  while (ahead_.size() < interleave_ && next_segment_ + ahead_.size() < plan_.size())
    ahead_.push_back(read_async(plan_[next_segment_ + ahead_.size()]));
}

bool RecordSource::next(RawRecord* out) {
  while (slots_.size() < interleave_ && !ahead_.empty()) {
    // Only at start-up: later, finished slots are replaced in place.
    slots_.push_back({plan_[next_segment_++], ahead_.front(), 0});
    ahead_.pop_front();
    fill_slots();
  }
  if (slots_.empty()) return false;
  Slot& slot = slots_[cursor_];
  const SegmentBytes& data = slot.bytes.get();
  uint64_t record = slot.segment.first + slot.done;
  *out = {data, static_cast<size_t>(record - data->segment.first)};
  if (++slot.done < slot.segment.count) {
    cursor_ = (cursor_ + 1) % slots_.size();
  } else if (!ahead_.empty()) {
    slot = {plan_[next_segment_++], ahead_.front(), 0};
    ahead_.pop_front();
    fill_slots();
    cursor_ = (cursor_ + 1) % slots_.size();
  } else {
    slots_.erase(slots_.begin() + static_cast<std::ptrdiff_t>(cursor_));
    if (cursor_ >= slots_.size()) cursor_ = 0;
  }
  return true;
}

}  // namespace lockstep::data
