#include <cstring>

#include <fmt/format.h>

#include "lockstep/base/check.h"
#include "lockstep/data/crc32c.h"
#include "lockstep/data/record_io.h"

namespace lockstep::data {
namespace {

// TFRecord integers are little-endian on disk whatever the host.
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

Frame problem(Problem kind, std::string detail) {
  Frame f;
  f.problem = kind;
  f.detail = std::move(detail);
  return f;
}

}  // namespace

void append_frame(std::string& out, std::string_view payload) {
  size_t start = out.size();
  put_le(out, payload.size(), 8);
  put_le(out, crc32c::mask(crc32c::value(out.data() + start, 8)), 4);
  out.append(payload);
  put_le(out, crc32c::mask(crc32c::value(payload)), 4);
  // Paired with parse_frame's f.size: an index built from writers' offsets
  // and one built by reading the file agree byte for byte.
  LOCKSTEP_DCHECK_EQ(out.size() - start, framed_size(payload.size()));
}

Frame parse_frame(std::span<const uint8_t> bytes) {
  if (bytes.size() < kHeaderBytes)
    return problem(Problem::kTruncatedHeader,
                   fmt::format("only {} of {} header bytes present", bytes.size(), kHeaderBytes));
  uint64_t length = get_le(bytes.data(), 8);
  uint32_t stored = static_cast<uint32_t>(get_le(bytes.data() + 8, 4));
  uint32_t computed = crc32c::mask(crc32c::value(bytes.data(), 8));
  if (stored != computed)
    return problem(Problem::kLengthCrc,
                   fmt::format("stored 0x{:08x}, computed 0x{:08x}", stored, computed));
  uint64_t available = bytes.size() - kHeaderBytes;
  if (length > available || available - length < kFooterBytes) {
    Frame f =
        problem(Problem::kTruncatedPayload, fmt::format("length {} needs {} more bytes, {} present",
                                                        length, length + kFooterBytes, available));
    f.size = framed_size(length);
    return f;
  }
  const uint8_t* payload = bytes.data() + kHeaderBytes;
  stored = static_cast<uint32_t>(get_le(payload + length, 4));
  computed = crc32c::mask(crc32c::value(payload, length));
  if (stored != computed) {
    Frame f = problem(Problem::kPayloadCrc,
                      fmt::format("stored 0x{:08x}, computed 0x{:08x}", stored, computed));
    f.size = framed_size(length);  // the length is trustworthy: the next record is findable
    return f;
  }
  Frame f;
  f.payload = std::string_view(reinterpret_cast<const char*>(payload), length);
  f.size = framed_size(length);
  LOCKSTEP_DCHECK_LE(f.size, bytes.size(), "record frame: a whole frame past the input");
  return f;
}

Frame parse_indexed_frame(std::span<const uint8_t> bytes) {
  // No frame is empty, so no byte at all means the file ends before the
  // record: cut at a record boundary (or earlier) after indexing.
  if (bytes.empty())
    return problem(Problem::kIndexMismatch,
                   "the file ends before this record, which its index lists; it is shorter "
                   "than when it was indexed");
  Frame frame = parse_frame(bytes);
  if (frame.problem == Problem::kNone && frame.size != bytes.size())
    return problem(Problem::kLengthCrc,
                   fmt::format("frame is {} bytes but the index says {}: the index is stale, "
                               "re-create it",
                               frame.size, bytes.size()));
  return frame;
}

}  // namespace lockstep::data
