#include <algorithm>

#include "lockstep/data/sample.h"
#include "data/rng.h"

namespace lockstep::data {
namespace {

float channel_value(const std::vector<float>& v, int c) {
  return v.empty() ? 0.0f : v[std::min<size_t>(c, v.size() - 1)];
}

// Offset of the crop window along one axis; negative when the image is
// smaller than the crop (the window is then centred with zero padding).
int crop_origin(int size, int crop, bool random, Rng& rng) {
  if (crop >= size) return -(crop - size) / 2;
  return random ? static_cast<int>(rng.below(static_cast<uint64_t>(size - crop + 1)))
                : (size - crop) / 2;
}

}  // namespace

void augment(const PixelView& image, const DecodeOptions& options, uint64_t seed, Sample* out) {
  Rng rng(seed);
  int out_h = options.crop_height > 0 ? options.crop_height : image.height;
  int out_w = options.crop_width > 0 ? options.crop_width : image.width;
  int y0 = crop_origin(image.height, out_h, options.random_crop, rng);
  int x0 = crop_origin(image.width, out_w, options.random_crop, rng);
  bool flip = options.random_flip && rng.coin();
  int channels = image.channels;
  out->shape = {channels, out_h, out_w};
  out->data.assign(size_t(channels) * out_h * out_w, 0.0f);
  for (int c = 0; c < channels; ++c) {
    float stddev = channel_value(options.stddev, c);
    float scale = image.values ? 1.0f / stddev : 1.0f / (255.0f * stddev);
    float shift = -channel_value(options.mean, c) / stddev;
    float* plane = out->data.data() + size_t(c) * out_h * out_w;
    for (int y = 0; y < out_h; ++y) {
      int sy = y0 + y;
      if (sy < 0 || sy >= image.height) {
        std::fill(plane + size_t(y) * out_w, plane + size_t(y + 1) * out_w, shift);
        continue;
      }
      size_t row = size_t(sy) * image.width * channels;
      for (int x = 0; x < out_w; ++x) {
        int sx = x0 + (flip ? out_w - 1 - x : x);
        size_t at = row + size_t(sx) * channels + c;
        float v = (sx < 0 || sx >= image.width) ? 0.0f
                  : image.values                ? image.values[at]
                                                : float(image.pixels[at]);
        plane[size_t(y) * out_w + x] = v * scale + shift;
      }
    }
  }
}

}  // namespace lockstep::data
