// Decoding and augmentation on images generated here with libjpeg/libpng.
#include "lockstep/data/image.h"

#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/data/example.h"
#include "lockstep/data/sample.h"

namespace lockstep::data {
namespace {

Image pattern(int h, int w, int c) {
  Image img{h, w, c, std::vector<uint8_t>(size_t(h) * w * c)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) img.pixels[(size_t(y) * w + x) * c + k] = uint8_t(x * 10 + k);
  return img;
}

TEST(Image, PngRoundTripsExactly) {
  Image img = pattern(7, 9, 3);
  std::string error;
  auto back = decode_png(encode_png(img), 0, &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->height, 7);
  EXPECT_EQ(back->width, 9);
  EXPECT_EQ(back->channels, 3);
  EXPECT_EQ(back->pixels, img.pixels);
}

TEST(Image, JpegDecodesToTheEncodedSizeAndRequestedChannels) {
  std::string jpeg = encode_jpeg(pattern(32, 48, 3), 95);
  EXPECT_EQ(sniff_image_format(jpeg), ImageFormat::kJpeg);
  std::string error;
  auto rgb = decode_image(jpeg, 0, &error);
  ASSERT_TRUE(rgb) << error;
  EXPECT_EQ(rgb->height, 32);
  EXPECT_EQ(rgb->width, 48);
  EXPECT_EQ(rgb->channels, 3);
  auto gray = decode_image(jpeg, 1, &error);
  ASSERT_TRUE(gray);
  EXPECT_EQ(gray->channels, 1);
  EXPECT_EQ(gray->pixels.size(), 32u * 48u);
}

TEST(Image, CorruptBytesGiveAnErrorNotACrash) {
  std::string error;
  std::string jpeg = encode_jpeg(pattern(16, 16, 3));
  EXPECT_FALSE(decode_image(jpeg.substr(0, 20), 0, &error));
  EXPECT_FALSE(error.empty());
  std::string png = encode_png(pattern(16, 16, 1));
  png[20] ^= 0x55;  // IHDR CRC no longer matches
  error.clear();
  EXPECT_FALSE(decode_image(png, 0, &error));
  EXPECT_FALSE(error.empty());
  EXPECT_FALSE(decode_image("hello", 0, &error));
}

TEST(Augment, CropFlipAndNormaliseShapesAndValues) {
  Image img = pattern(10, 12, 3);
  DecodeOptions o;
  o.crop_height = 6;
  o.crop_width = 8;
  o.random_crop = false;  // centre: rows 2..7, cols 2..9
  o.mean = {0.5f};
  o.stddev = {0.25f};
  Sample s;
  augment(img, o, 1, &s);
  EXPECT_EQ(s.shape, (std::vector<int64_t>{3, 6, 8}));
  ASSERT_EQ(s.data.size(), 3u * 6 * 8);
  // channel 1, first column: x = 2 -> pixel 21
  EXPECT_FLOAT_EQ(s.data[6 * 8], (21 / 255.0f - 0.5f) / 0.25f);

  o.random_flip = true;
  bool saw_flip = false, saw_plain = false;
  for (uint64_t seed = 0; seed < 32; ++seed) {
    augment(img, o, seed, &s);
    float first = s.data[0] * 0.25f + 0.5f;  // channel 0, x = 2 or (flipped) x = 9
    saw_plain |= std::abs(first - 20 / 255.0f) < 1e-5;
    saw_flip |= std::abs(first - 90 / 255.0f) < 1e-5;
  }
  EXPECT_TRUE(saw_flip);
  EXPECT_TRUE(saw_plain);
}

TEST(Augment, CropLargerThanImagePadsWithZeros) {
  DecodeOptions o;
  o.crop_height = o.crop_width = 6;
  Sample s;
  augment(pattern(2, 2, 1), o, 0, &s);
  EXPECT_EQ(s.shape, (std::vector<int64_t>{1, 6, 6}));
  EXPECT_EQ(s.data[0], 0.0f);
}

TEST(DecodeSample, JpegPngAndRawRecordsGiveCHWFloats) {
  DecodeOptions o;
  o.channels = 3;
  o.crop_height = o.crop_width = 16;
  Sample s;
  DecodeFailure failure;
  for (const std::string& bytes :
       {encode_jpeg(pattern(20, 24, 3)), encode_png(pattern(18, 16, 1))}) {
    Example e;
    e.set_bytes("image", bytes).set_int64s("label", {3});
    ASSERT_TRUE(decode_sample(serialize_example(e), o, 9, &s, &failure)) << failure.detail;
    EXPECT_EQ(s.shape, (std::vector<int64_t>{3, 16, 16}));
    EXPECT_EQ(s.label, 3);
  }
  Example raw;
  raw.set_bytes("image", std::string(28 * 28, '\x80'))
      .set_int64s("label", {1})
      .set_int64s("shape", {28, 28})
      .set_bytes("format", "raw");
  ASSERT_TRUE(decode_sample(serialize_example(raw), DecodeOptions{}, 0, &s, &failure));
  EXPECT_EQ(s.shape, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_FLOAT_EQ(s.data[0], 128 / 255.0f);
}

TEST(DecodeSample, MissingFeaturesAreBadExamples) {
  Example e;
  e.set_bytes("image", "xx");
  Sample s;
  DecodeFailure failure;
  EXPECT_FALSE(decode_sample(serialize_example(e), DecodeOptions{}, 0, &s, &failure));
  EXPECT_EQ(failure.problem, Problem::kBadExample);
}

}  // namespace
}  // namespace lockstep::data
