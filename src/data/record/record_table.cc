#include "lockstep/data/record_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/data/record_io.h"

namespace lockstep::data {
namespace {

// Readers follow the index, so bytes past the last indexed record (garbage
// appended, a half-written tail, a record written after indexing) would
// never be looked at: the job would train on less than the file holds and
// say nothing. A file shorter than indexed is caught record by record.
void check_no_tail(int fd, const ShardInfo& shard) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) <= shard.bytes) return;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  throw BadRecord(Problem::kIndexMismatch, shard.path, shard.records(), shard.bytes,
                  fmt::format("the file is {} bytes but its index ends at byte {}: {} bytes "
                              "after the last indexed record would be ignored (appended data, a "
                              "half-written tail, or records written after indexing)",
                              size, shard.bytes, size - shard.bytes));
}

}  // namespace

RecordTable::RecordTable(RecordIndex index) : index_(std::move(index)) {
  starts_.push_back(0);
  for (const auto& shard : index_.shards) {
    int fd = ::open(shard.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      for (int open_fd : fds_) ::close(open_fd);
      throw Error(fmt::format("cannot open shard {}: {}; check the index's folder", shard.path,
                              std::strerror(errno)));
    }
    fds_.push_back(fd);
    try {
      shard.check_layout();  // an index built in memory is not load()'s
      check_no_tail(fd, shard);
    } catch (...) {
      for (int open_fd : fds_) ::close(open_fd);
      throw;
    }
    starts_.push_back(starts_.back() + shard.records());
  }
}

RecordTable::~RecordTable() {
  for (int fd : fds_) ::close(fd);
}

std::pair<uint32_t, uint64_t> RecordTable::locate(uint64_t i) const {
  if (i >= size())
    throw InvalidArgument(fmt::format("record {} of a set of {} records", i, size()));
  auto it = std::upper_bound(starts_.begin(), starts_.end(), i) - 1;
  const auto shard = static_cast<uint32_t>(it - starts_.begin());
  LOCKSTEP_DCHECK_LT(i - *it, index_.shards[shard].records());
  return {shard, i - *it};
}

std::string RecordTable::read_bytes(uint32_t shard, uint64_t begin, uint64_t end) const {
  std::string out(end - begin, '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fds_[shard], out.data() + done, out.size() - done,
                        static_cast<off_t>(begin + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw Error(fmt::format("reading {} at byte {} failed: {}", index_.shards[shard].path,
                              begin + done, std::strerror(errno)));
    if (n == 0) break;  // file shorter than indexed: the frame check reports truncation
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

std::string RecordTable::read(uint64_t i) const {
  auto [shard, record] = locate(i);
  const ShardInfo& info = index_.shards[shard];
  uint64_t begin = info.begin_of(record);
  // The constructor refused an index whose offsets do not rise by a frame.
  LOCKSTEP_DCHECK_LE(begin + framed_size(0), info.end_of(record, 1), "shard {} record {}",
                     info.path, record);
  std::string bytes = read_bytes(shard, begin, info.end_of(record, 1));
  Frame frame = parse_indexed_frame({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  if (frame.problem != Problem::kNone)
    throw BadRecord(frame.problem, info.path, record, begin, frame.detail);
  return std::string(frame.payload);
}

}  // namespace lockstep::data
