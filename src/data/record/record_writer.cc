#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "lockstep/base/check.h"
#include "lockstep/base/log.h"
#include "lockstep/data/record_io.h"

namespace lockstep::data {

RecordWriter::RecordWriter(std::string path) : path_(std::move(path)) {
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_)
    throw Error(fmt::format("cannot create record file {}: {}", path_, std::strerror(errno)));
  // Records are small; a large stdio buffer turns them into few big writes.
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
}

RecordWriter::~RecordWriter() {
  try {
    close();
  } catch (const Error& e) {
    log(LogLevel::kError, "{}", e.what());
  }
}

uint64_t RecordWriter::write(std::string_view payload) {
  if (!file_) throw Error(fmt::format("{}: write after close", path_));
  frame_.clear();
  append_frame(frame_, payload);
  if (std::fwrite(frame_.data(), 1, frame_.size(), file_) != frame_.size())
    throw Error(fmt::format("writing {} failed at byte {}: {} (disk full?)", path_, offset_,
                            std::strerror(errno)));
  uint64_t start = offset_;
  LOCKSTEP_DCHECK_EQ(frame_.size(), framed_size(payload.size()));
  offset_ += frame_.size();
  ++records_;
  return start;
}

void RecordWriter::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0)
    throw Error(fmt::format("closing {} failed: {} (disk full?)", path_, std::strerror(errno)));
}

}  // namespace lockstep::data
