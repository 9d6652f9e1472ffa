#include <png.h>

#include <cstring>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/data/image.h"

namespace lockstep::data {
namespace {

// The simplified libpng API (png_image) handles every bit depth, palette and
// interlacing and converts to the format we ask for.
uint32_t png_format(int channels) { return channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB; }

}  // namespace

std::optional<Image> decode_png(std::string_view bytes, int channels, std::string* error) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) {
    *error = fmt::format("libpng: {}", png.message);
    return std::nullopt;
  }
  if (channels == 0) channels = (png.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
  png.format = png_format(channels);
  Image image;
  image.height = static_cast<int>(png.height);
  image.width = static_cast<int>(png.width);
  image.channels = channels;
  image.pixels.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, image.pixels.data(), 0, nullptr)) {
    *error = fmt::format("libpng: {}", png.message);
    png_image_free(&png);
    return std::nullopt;
  }
  return image;
}

std::string encode_png(const Image& image) {
  if (image.channels != 1 && image.channels != 3)
    throw InvalidArgument(fmt::format("encode_png: {} channels (need 1 or 3)", image.channels));
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = png_format(image.channels);
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&png, nullptr, &size, 0, image.pixels.data(), 0, nullptr))
    throw Error(fmt::format("libpng: {}", png.message));
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&png, out.data(), &size, 0, image.pixels.data(), 0, nullptr))
    throw Error(fmt::format("libpng: {}", png.message));
  out.resize(size);
  return out;
}

ImageFormat sniff_image_format(std::string_view b) {
  if (b.size() >= 3 && static_cast<uint8_t>(b[0]) == 0xff && static_cast<uint8_t>(b[1]) == 0xd8)
    return ImageFormat::kJpeg;
  if (b.size() >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

std::optional<Image> decode_image(std::string_view bytes, int channels, std::string* error) {
  switch (sniff_image_format(bytes)) {
    case ImageFormat::kJpeg: return decode_jpeg(bytes, channels, error);
    case ImageFormat::kPng: return decode_png(bytes, channels, error);
    default: *error = "bytes are neither JPEG nor PNG (unknown magic)"; return std::nullopt;
  }
}

}  // namespace lockstep::data
