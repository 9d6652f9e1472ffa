// CRC-32C (Castagnoli), the checksum TFRecord and LevelDB frame records with.
//
// Computed by Intel's ISA-L (Debian libisal-dev, crc32_iscsi: SSE4.2 crc32
// and PCLMUL folding, dispatched at run time), about 20x the table-driven
// slicing-by-8 code it replaced from 4 KiB up (docs/data.md). Checked against
// the RFC 3720 known answers in tests/data/crc32c_test.cc. Pure functions:
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lockstep::data::crc32c {

// Continues a CRC over `size` more bytes: extend(extend(0, a), b) == value(a+b).
uint32_t extend(uint32_t crc, const void* data, size_t size);

inline uint32_t value(const void* data, size_t size) { return extend(0, data, size); }
inline uint32_t value(std::string_view bytes) { return value(bytes.data(), bytes.size()); }

// TFRecord stores "masked" CRCs: a CRC computed over data that embeds CRCs is
// weak, so the stored value is rotated and offset (same constant as LevelDB).
inline constexpr uint32_t kMaskDelta = 0xa282ead8u;
inline uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
inline uint32_t unmask(uint32_t masked) {
  uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace lockstep::data::crc32c
