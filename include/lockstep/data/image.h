// JPEG (libjpeg-turbo) and PNG (libpng) decoding to 8-bit HWC pixels, plus the
// encoders tests and benchmarks use to make images. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::data {

struct Image {
  int height = 0;
  int width = 0;
  int channels = 0;             // 1 (gray) or 3 (RGB)
  std::vector<uint8_t> pixels;  // row-major HWC
};

enum class ImageFormat { kUnknown, kJpeg, kPng };
// From the magic bytes, not a file name.
ImageFormat sniff_image_format(std::string_view bytes);

// Decodes to `channels` channels (1 or 3; 0 keeps the file's own). nullopt
// and *error when the bytes are not a decodable JPEG/PNG.
std::optional<Image> decode_image(std::string_view bytes, int channels, std::string* error);
std::optional<Image> decode_jpeg(std::string_view bytes, int channels, std::string* error);
std::optional<Image> decode_png(std::string_view bytes, int channels, std::string* error);

// Throw lockstep::Error on failure (only for bad arguments).
std::string encode_jpeg(const Image& image, int quality = 90);
std::string encode_png(const Image& image);

}  // namespace lockstep::data
