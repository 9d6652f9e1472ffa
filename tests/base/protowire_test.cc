// The shared protocol-buffer wire codec: bytes checked against the
// encoding guide's own worked examples (protobuf.dev/programming-guides/
// encoding: field 1 = 150 is 08 96 01; field 2 = "testing" is
// 12 07 74 65 73 74 69 6e 67), then written fields read back, and
// malformed input refused without reading past the end.
#include <gtest/gtest.h>

#include <bit>
#include <string>

#include "lockstep/base/protowire.h"

namespace lockstep::protowire {
namespace {

std::string hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes)
    out += "0123456789abcdef"[c >> 4], out += "0123456789abcdef"[c & 15];
  return out;
}

TEST(Protowire, WritesTheEncodingGuidesExamples) {
  std::string out;
  field_varint(out, 1, 150);
  EXPECT_EQ(hex(out), "089601");
  out.clear();
  field_bytes(out, 2, "testing");
  EXPECT_EQ(hex(out), "120774657374696e67");
  out.clear();
  field_float(out, 3, 1.0f);  // 0x3f800000 little-endian, wire type 5
  EXPECT_EQ(hex(out), "1d0000803f");
}

TEST(Protowire, ReadsBackWhatItWrites) {
  std::string out;
  field_varint(out, 1, 1ull << 40);
  field_double(out, 2, -2.5);
  field_bytes(out, 3, "xyz");
  field_float(out, 4, 0.25f);
  Reader r(out);
  uint32_t field = 0, wire = 0;
  uint64_t v = 0;
  ASSERT_TRUE(r.tag(&field, &wire));
  EXPECT_EQ(field, 1u);
  EXPECT_EQ(wire, kVarint);
  ASSERT_TRUE(r.varint(&v));
  EXPECT_EQ(v, 1ull << 40);
  ASSERT_TRUE(r.tag(&field, &wire));
  EXPECT_EQ(wire, kFixed64);
  ASSERT_TRUE(r.fixed64(&v));
  EXPECT_EQ(std::bit_cast<double>(v), -2.5);
  ASSERT_TRUE(r.tag(&field, &wire));
  std::string_view s;
  ASSERT_TRUE(r.bytes(&s));
  EXPECT_EQ(s, "xyz");
  ASSERT_TRUE(r.tag(&field, &wire));
  ASSERT_TRUE(r.skip(wire));  // the float
  EXPECT_TRUE(r.done());
}

TEST(Protowire, MalformedInputIsRefusedInsideItsBounds) {
  uint64_t v;
  uint32_t f, w;
  std::string_view s;
  EXPECT_FALSE(Reader(std::string_view("\x96", 1)).varint(&v));    // continuation, then the end
  EXPECT_FALSE(Reader(std::string_view("\x07tes", 4)).bytes(&s));  // length 7, 3 bytes left
  EXPECT_FALSE(Reader(std::string_view("\x00", 1)).tag(&f, &w));   // field 0
  Reader group(std::string_view("\x0b", 1));                       // field 1, wire 3 (a group)
  ASSERT_TRUE(group.tag(&f, &w));
  EXPECT_FALSE(group.skip(w));
  uint32_t x;
  EXPECT_FALSE(Reader(std::string_view("\x01\x02\x03", 3)).fixed32(&x));
  EXPECT_FALSE(Reader(std::string_view("\x01\x02\x03\x04\x05", 5)).fixed64(&v));
}

}  // namespace
}  // namespace lockstep::protowire
