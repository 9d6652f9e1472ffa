// TFRecord framing must be byte-identical to TensorFlow's, so the expected
// bytes here are assembled by hand from CRC32C known answers and a bit-by-bit
// reference CRC, independent of the table-driven implementation.
#include <gtest/gtest.h>

#include <string>

#include "lockstep/data/example.h"
#include "lockstep/data/record_io.h"
#include "test_util.h"

namespace lockstep::data {
namespace {

using testing::read_file;
using testing::TempDir;

uint32_t reference_crc32c(const std::string& bytes) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
  }
  return ~crc;
}

uint32_t tf_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

TEST(RecordFormat, ReferenceCrcAgreesWithKnownAnswers) {
  EXPECT_EQ(reference_crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(reference_crc32c(std::string(32, '\0')), 0x8a9136aau);
}

TEST(RecordFormat, WriterMatchesHandAssembledRecords) {
  // Payload "123456789": its CRC is the RFC known answer 0xE3069283.
  std::string length9 = le(9, 8);
  std::string record1 = length9 + le(tf_mask(reference_crc32c(length9)), 4) + "123456789" +
                        le(tf_mask(0xe3069283u), 4);
  // 32 zero bytes: CRC 0x8A9136AA.
  std::string length32 = le(32, 8);
  std::string record2 = length32 + le(tf_mask(reference_crc32c(length32)), 4) +
                        std::string(32, '\0') + le(tf_mask(0x8a9136aau), 4);
  ASSERT_EQ(record1.size(), 12u + 9 + 4);
  EXPECT_EQ(static_cast<uint8_t>(record1[0]), 9);  // little-endian length

  TempDir dir;
  std::string path = dir / "two.tfrecord";
  {
    RecordWriter writer(path);
    EXPECT_EQ(writer.write("123456789"), 0u);
    EXPECT_EQ(writer.write(std::string(32, '\0')), record1.size());
    writer.close();
  }
  EXPECT_EQ(read_file(path), record1 + record2);

  RecordReader reader(path);
  std::string payload;
  ASSERT_TRUE(reader.next(&payload));
  EXPECT_EQ(payload, "123456789");
  ASSERT_TRUE(reader.next(&payload));
  EXPECT_EQ(payload, std::string(32, '\0'));
  EXPECT_FALSE(reader.next(&payload));
}

TEST(RecordFormat, RoundTripsEmptySmallAndLargePayloads) {
  TempDir dir;
  std::string path = dir / "mixed.tfrecord";
  std::vector<std::string> payloads = {"", "x", std::string(100000, 'y'), "tail"};
  for (int i = 0; i < 1000; ++i)
    payloads.push_back(std::string(size_t(i % 97), char('a' + i % 26)));
  {
    RecordWriter writer(path);
    for (const auto& p : payloads) writer.write(p);
  }
  RecordReader reader(path);
  std::string payload;
  for (const auto& expected : payloads) {
    ASSERT_TRUE(reader.next(&payload));
    ASSERT_EQ(payload, expected);
  }
  EXPECT_FALSE(reader.next(&payload));
  EXPECT_EQ(reader.skipped(), 0u);
}

TEST(RecordFormat, EmptyFileHasNoRecords) {
  TempDir dir;
  { RecordWriter writer(dir / "empty.tfrecord"); }
  RecordReader reader(dir / "empty.tfrecord");
  std::string payload;
  EXPECT_FALSE(reader.next(&payload));
}

TEST(ExampleProto, SerializesWithTensorFlowFieldNumbers) {
  // Example{features{feature{key:"a" value{int64_list{value:1}}}}}, assembled
  // by hand from the field numbers in tensorflow/core/example/*.proto.
  const std::string expected(
      "\x0a\x0c\x0a\x0a\x0a\x01"
      "a"
      "\x12\x05\x1a\x03\x0a\x01\x01",
      14);
  Example example;
  example.set_int64s("a", {1});
  EXPECT_EQ(serialize_example(example), expected);
}

TEST(ExampleProto, RoundTripsAllThreeKinds) {
  Example example;
  example.set_bytes("image", std::string("\0\1\2", 3))
      .set_int64s("label", {7, -3})
      .set_floats("score", {0.5f, -1.25f});
  std::string error;
  auto parsed = parse_example(serialize_example(example), &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_EQ(*parsed->bytes("image"), BytesList{std::string("\0\1\2", 3)});
  EXPECT_EQ(*parsed->int64s("label"), (Int64List{7, -3}));
  EXPECT_EQ(*parsed->floats("score"), (FloatList{0.5f, -1.25f}));
  EXPECT_EQ(parsed->int64s("image"), nullptr);  // wrong kind
  EXPECT_EQ(parsed->bytes("missing"), nullptr);
}

TEST(ExampleProto, RejectsGarbage) {
  std::string error;
  EXPECT_FALSE(parse_example("\xff\xff\xff\xff garbage", &error));
  EXPECT_FALSE(error.empty());
}

}  // namespace
}  // namespace lockstep::data
