#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "lockstep/base/check.h"
#include "lockstep/data/record_io.h"

namespace lockstep::data {
namespace {
constexpr size_t kReadChunk = 1 << 20;
}

RecordReader::RecordReader(std::string path, BadDataPolicy policy)
    : path_(std::move(path)), policy_(policy) {
  file_ = std::fopen(path_.c_str(), "rb");
  if (!file_)
    throw Error(fmt::format("cannot open record file {}: {}", path_, std::strerror(errno)));
}

RecordReader::RecordReader(const ShardInfo& shard, BadDataPolicy policy)
    : RecordReader(shard.path, policy) {
  indexed_ = true;
  indexed_offsets_ = shard.offsets;
  indexed_bytes_ = shard.bytes;
}

RecordReader::~RecordReader() {
  if (file_) std::fclose(file_);
}

std::span<const uint8_t> RecordReader::unread() const {
  return {reinterpret_cast<const uint8_t*>(buffer_.data()) + pos_, buffer_.size() - pos_};
}

bool RecordReader::fill(size_t needed) {
  if (buffer_.size() - pos_ >= needed) return true;
  buffer_.erase(0, pos_);
  pos_ = 0;
  while (buffer_.size() < needed) {
    // Grow at most by what is already buffered (or one chunk), so a huge but
    // CRC-valid length on a short file allocates about twice the bytes the
    // file really holds, not the length it claims (the records fuzzer found
    // 64 MiB allocations per corrupt header before).
    size_t old = buffer_.size();
    buffer_.resize(old + std::min(needed - old, std::max(kReadChunk, old)));
    size_t got = std::fread(buffer_.data() + old, 1, buffer_.size() - old, file_);
    buffer_.resize(old + got);
    if (got == 0) {
      if (std::ferror(file_))
        throw Error(fmt::format("reading {} failed: {}", path_, std::strerror(errno)));
      return false;
    }
  }
  return true;
}

void RecordReader::fail(const Frame& frame) {
  BadRecord error(frame.problem, path_, index_, offset_, frame.detail);
  if (policy_ == BadDataPolicy::kThrow) throw error;
  if (skipped_++ == 0) first_skip_reason_ = error.what();
}

// `count` records are lost to the mismatch (with kSkip they are counted).
void RecordReader::fail_index(const std::string& detail, uint64_t count) {
  BadRecord error(Problem::kIndexMismatch, path_, index_, offset_, detail);
  if (policy_ == BadDataPolicy::kThrow) throw error;
  if (skipped_ == 0) first_skip_reason_ = error.what();
  skipped_ += count;
}

uint64_t RecordReader::indexed_remaining() const {
  return index_ < indexed_offsets_.size() ? indexed_offsets_.size() - index_ : 0;
}

bool RecordReader::end_of_file() {
  done_ = true;
  if (indexed_remaining() > 0)
    fail_index(fmt::format("the file ends after {} of the {} records its index lists ({} of {} "
                           "bytes)",
                           index_, indexed_offsets_.size(), offset_, indexed_bytes_),
               indexed_remaining());
  return false;
}

bool RecordReader::next(std::string* payload) {
  while (!done_) {
    fill(kHeaderBytes);
    if (unread().empty()) return end_of_file();
    if (indexed_remaining() > 0 && indexed_offsets_[index_] != offset_) {
      done_ = true;
      fail_index(fmt::format("the record starts at byte {} but its index says {}", offset_,
                             indexed_offsets_[index_]),
                 indexed_remaining());
      return false;
    }
    Frame frame = parse_frame(unread());
    if (frame.problem == Problem::kTruncatedPayload) {
      fill(frame.size);  // the header is valid; the rest may just not be buffered yet
      frame = parse_frame(unread());
    }
    if (frame.problem != Problem::kNone) fail(frame);
    if (frame.problem != Problem::kNone && frame.problem != Problem::kPayloadCrc) {
      // A bad length or a truncation hides where the next record starts; the
      // index says how many records that loses.
      if (indexed_remaining() > 1) skipped_ += indexed_remaining() - 1;
      done_ = true;
      return false;
    }
    const bool beyond_index = indexed_ && indexed_remaining() == 0;
    if (beyond_index)
      fail_index(fmt::format("the file holds records beyond the {} its index lists ({} bytes)",
                             indexed_offsets_.size(), indexed_bytes_),
                 1);
    const bool deliver = frame.problem == Problem::kNone && !beyond_index;
    if (deliver) payload->assign(frame.payload);
    pos_ += frame.size;
    LOCKSTEP_DCHECK_LE(pos_, buffer_.size(), "{}: record {} ends past the bytes read", path_,
                       index_);
    offset_ += frame.size;
    ++index_;
    if (deliver) return true;
  }
  return false;
}

}  // namespace lockstep::data
