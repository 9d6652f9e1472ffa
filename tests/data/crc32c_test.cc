#include "lockstep/data/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace lockstep::data {
namespace {

// Known answers from RFC 3720 (iSCSI) appendix B.4 and the CRC catalogue.
TEST(Crc32c, KnownAnswers) {
  EXPECT_EQ(crc32c::value("123456789"), 0xe3069283u);
  EXPECT_EQ(crc32c::value(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(crc32c::value(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc32c::value(ascending), 0x46dd794eu);
  EXPECT_EQ(crc32c::value(descending), 0x113fdb5cu);
  EXPECT_EQ(crc32c::value(""), 0u);
}

TEST(Crc32c, ExtendEqualsWholeForEverySplit) {
  std::string data;
  for (int i = 0; i < 100; ++i) data.push_back(static_cast<char>(i * 37 + 11));
  uint32_t whole = crc32c::value(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    uint32_t part = crc32c::value(data.data(), split);
    EXPECT_EQ(crc32c::extend(part, data.data() + split, data.size() - split), whole) << split;
  }
}

// The definition, one bit at a time (reflected polynomial 0x82f63b78).
uint32_t bitwise_crc32c(const unsigned char* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1) ? 0x82f63b78u : 0);
  }
  return ~c;
}

// The accelerated code takes other paths for long and unaligned buffers.
TEST(Crc32c, LongAndUnalignedInputsMatchABitwiseReference) {
  std::string data(70000, '\0');
  uint32_t x = 12345;
  for (char& c : data) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  for (size_t offset : {0, 1, 3, 7})
    for (size_t n : {1, 7, 8, 63, 64, 255, 256, 257, 1000, 4099, 65537}) {
      const auto* p = reinterpret_cast<const unsigned char*>(data.data()) + offset;
      EXPECT_EQ(crc32c::value(p, n), bitwise_crc32c(p, n)) << "offset " << offset << " size " << n;
    }
}

TEST(Crc32c, MaskRoundTripsAndDiffers) {
  uint32_t crc = crc32c::value("foo");
  EXPECT_NE(crc32c::mask(crc), crc);
  EXPECT_NE(crc32c::mask(crc32c::mask(crc)), crc);
  EXPECT_EQ(crc32c::unmask(crc32c::mask(crc)), crc);
  EXPECT_EQ(crc32c::unmask(crc32c::unmask(crc32c::mask(crc32c::mask(crc)))), crc);
}

}  // namespace
}  // namespace lockstep::data
