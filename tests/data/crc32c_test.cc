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

TEST(Crc32c, MaskRoundTripsAndDiffers) {
  uint32_t crc = crc32c::value("foo");
  EXPECT_NE(crc32c::mask(crc), crc);
  EXPECT_NE(crc32c::mask(crc32c::mask(crc)), crc);
  EXPECT_EQ(crc32c::unmask(crc32c::mask(crc)), crc);
  EXPECT_EQ(crc32c::unmask(crc32c::unmask(crc32c::mask(crc32c::mask(crc)))), crc);
}

}  // namespace
}  // namespace lockstep::data
