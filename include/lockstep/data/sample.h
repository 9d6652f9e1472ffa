// Turns one record payload (a serialized tf.train.Example) into a training
// sample: float CHW pixels and an int64 label. Raw pixel records (IDX
// converts; 8-bit bytes, or a float list, with a "shape" feature) and encoded
// JPEG/PNG records go through the same augmentation:
// optional crop (random or centre), optional horizontal flip, scale to [0,1]
// and normalise per channel. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/data/bad_record.h"
#include "lockstep/data/image.h"

namespace lockstep::data {

struct DecodeOptions {
  std::string image_key = "image";    // bytes: raw pixels or an encoded JPEG/PNG
  std::string label_key = "label";    // int64
  std::string shape_key = "shape";    // int64 [H, W] or [H, W, C]; needed for raw pixels only
  std::string format_key = "format";  // bytes "raw", "jpeg" or "png"; sniffed when absent
  int channels = 0;                   // encoded images: 1 or 3; 0 keeps the file's own
  int crop_height = 0;                // 0: no crop (then all images must share one size)
  int crop_width = 0;
  bool random_crop = true;  // false: centre crop
  bool random_flip = false;
  std::vector<float> mean{0.0f};  // per channel (or one for all), after scaling to [0,1]
  std::vector<float> stddev{1.0f};
};

struct Sample {
  std::vector<int64_t> shape;  // C, H, W
  std::vector<float> data;
  int64_t label = 0;
};

struct DecodeFailure {
  Problem problem = Problem::kNone;
  std::string detail;
};

// `seed` drives the random crop and flip, so a sample's augmentation depends
// on its seed only, never on which thread decodes it. False + *failure on a
// bad payload (kBadExample) or image (kUndecodable).
bool decode_sample(std::string_view payload, const DecodeOptions& options, uint64_t seed,
                   Sample* out, DecodeFailure* failure);

// Crop/flip/normalise HWC pixels into float CHW (exposed for tests). 8-bit
// pixels are scaled to [0, 1] first; float pixels (`values`, set instead of
// `pixels`: HDF5 float datasets, float Example features) are used as they are.
struct PixelView {
  int height = 0;
  int width = 0;
  int channels = 0;
  const uint8_t* pixels = nullptr;
  const float* values = nullptr;
};
void augment(const PixelView& image, const DecodeOptions& options, uint64_t seed, Sample* out);
inline void augment(const Image& image, const DecodeOptions& options, uint64_t seed, Sample* out) {
  augment(PixelView{image.height, image.width, image.channels, image.pixels.data()}, options, seed,
          out);
}

}  // namespace lockstep::data
