#include "lockstep/data/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace lockstep::data::crc32c {

// ISA-L keeps the CRC register un-inverted between calls, so the standard
// pre/post inversion happens here; its length is an int, hence the chunks.
uint32_t extend(uint32_t crc, const void* data, size_t size) {
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));  // ISA-L only reads it
  uint32_t state = ~crc;
  constexpr size_t kChunk = size_t{1} << 30;
  while (size > 0) {
    const size_t n = size < kChunk ? size : kChunk;
    state = crc32_iscsi(p, static_cast<int>(n), state);
    p += n;
    size -= n;
  }
  return ~state;
}

}  // namespace lockstep::data::crc32c
