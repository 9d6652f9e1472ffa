// libjpeg reports errors through a callback that must not return; it longjmps
// back here, so no C++ object with a destructor may live between setjmp and
// the libjpeg calls (only plain buffers owned by the caller).
#include <csetjmp>
#include <cstdio>

#include <jpeglib.h>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/data/image.h"

namespace lockstep::data {
namespace {

struct ErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr info) {
  auto* mgr = reinterpret_cast<ErrorManager*>(info->err);
  (*info->err->format_message)(info, mgr->message);
  std::longjmp(mgr->jump, 1);
}

void on_warning(j_common_ptr, int) {}  // corrupt-data warnings: keep decoding, like PIL

bool decode_into(std::string_view bytes, int channels, Image* image, ErrorManager* err) {
  jpeg_decompress_struct info;
  info.err = jpeg_std_error(&err->base);
  err->base.error_exit = on_error;
  err->base.emit_message = on_warning;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  const int out_channels = channels != 0 ? channels : (info.num_components == 1 ? 1 : 3);
  info.out_color_space = out_channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&info);
  image->height = static_cast<int>(info.output_height);
  image->width = static_cast<int>(info.output_width);
  image->channels = out_channels;
  image->pixels.resize(size_t(image->height) * image->width * out_channels);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row =
        image->pixels.data() + size_t(info.output_scanline) * image->width * out_channels;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

}  // namespace

std::optional<Image> decode_jpeg(std::string_view bytes, int channels, std::string* error) {
  ErrorManager err{};
  Image image;
  if (!decode_into(bytes, channels, &image, &err)) {
    *error = fmt::format("libjpeg: {}", err.message);
    return std::nullopt;
  }
  return image;
}

std::string encode_jpeg(const Image& image, int quality) {
  if (image.channels != 1 && image.channels != 3)
    throw InvalidArgument(fmt::format("encode_jpeg: {} channels (need 1 or 3)", image.channels));
  jpeg_compress_struct info;
  jpeg_error_mgr err;
  info.err = jpeg_std_error(&err);  // errors here are programming errors: libjpeg exits
  jpeg_create_compress(&info);
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  jpeg_mem_dest(&info, &out, &out_size);
  info.image_width = static_cast<JDIMENSION>(image.width);
  info.image_height = static_cast<JDIMENSION>(image.height);
  info.input_components = image.channels;
  info.in_color_space = image.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    auto* row = const_cast<JSAMPLE*>(image.pixels.data() +
                                     size_t(info.next_scanline) * image.width * image.channels);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  std::string result(reinterpret_cast<char*>(out), out_size);
  std::free(out);
  return result;
}

}  // namespace lockstep::data
