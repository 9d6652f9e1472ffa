// The zero-copy Example reader must agree with protobuf's own parser.
#include "data/example/example_view.h"

#include <gtest/gtest.h>

#include <array>

#include "lockstep/data/example.h"

namespace lockstep::data {
namespace {

TEST(ExampleView, AgreesWithProtobufOnAllKinds) {
  Example e;
  e.set_bytes("image", std::string("\0\xff", 2))
      .set_int64s("label", {-5, 1LL << 40})
      .set_floats("f", {1.5f})
      .set_bytes("empty", "");
  std::string payload = serialize_example(e);
  const std::array<std::string_view, 4> keys{"image", "label", "f", "absent"};
  std::array<FeatureView, 4> views;
  ASSERT_TRUE(find_features(payload, keys, views));
  std::vector<std::string_view> bytes;
  std::vector<int64_t> ints;
  ASSERT_TRUE(views[0].bytes(&bytes));
  EXPECT_EQ(bytes, (std::vector<std::string_view>{std::string_view("\0\xff", 2)}));
  ASSERT_TRUE(views[1].int64s(&ints));
  EXPECT_EQ(ints, (std::vector<int64_t>{-5, 1LL << 40}));
  EXPECT_EQ(views[2].kind, FeatureView::kFloat);
  EXPECT_FALSE(views[2].int64s(&ints));
  EXPECT_EQ(views[3].kind, FeatureView::kMissing);
}

TEST(ExampleView, ReadsUnpackedInt64s) {
  // Example{features{feature{"a": int64_list{value: 7, value: 8}}}} with the
  // values unpacked (field 1, wire type 0), which parsers must accept.
  const std::string payload(
      "\x0a\x0d\x0a\x0b\x0a\x01"
      "a"
      "\x12\x06\x1a\x04\x08\x07\x08\x08",
      15);
  std::string error;
  auto reference = parse_example(payload, &error);
  ASSERT_TRUE(reference) << error;
  const std::array<std::string_view, 1> keys{"a"};
  std::array<FeatureView, 1> views;
  ASSERT_TRUE(find_features(payload, keys, views));
  std::vector<int64_t> ints;
  ASSERT_TRUE(views[0].int64s(&ints));
  EXPECT_EQ(ints, *reference->int64s("a"));
}

TEST(ExampleView, RejectsTruncatedAndGarbageInput) {
  Example e;
  e.set_bytes("image", "abcdef").set_int64s("label", {1});
  std::string payload = serialize_example(e);
  const std::array<std::string_view, 1> keys{"image"};
  std::array<FeatureView, 1> views;
  for (size_t cut = 1; cut < payload.size(); ++cut)
    EXPECT_FALSE(find_features(payload.substr(0, cut), keys, views)) << cut;
  EXPECT_FALSE(find_features("\xff\xff\xff\xff not a proto", keys, views));
}

}  // namespace
}  // namespace lockstep::data
