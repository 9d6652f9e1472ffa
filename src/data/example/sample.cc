#include "lockstep/data/sample.h"

#include <array>

#include <fmt/format.h>

#include "data/example/example_view.h"

namespace lockstep::data {
namespace {

bool fail(DecodeFailure* failure, Problem problem, std::string detail) {
  failure->problem = problem;
  failure->detail = std::move(detail);
  return false;
}

// Raw pixels (IDX converts: bytes; HDF5 float data: a float list) carry
// their shape; [H, W] means one channel. `elements` is what the list holds.
bool raw_shape(size_t elements, const FeatureView& shape_feature, PixelView* view,
               DecodeFailure* failure) {
  std::vector<int64_t> shape;
  if (!shape_feature.int64s(&shape) || (shape.size() != 2 && shape.size() != 3))
    return fail(failure, Problem::kBadExample,
                "raw image pixels need an int64 'shape' feature [H, W] or [H, W, C]");
  view->height = static_cast<int>(shape[0]);
  view->width = static_cast<int>(shape[1]);
  view->channels = shape.size() == 3 ? static_cast<int>(shape[2]) : 1;
  size_t expected = size_t(view->height) * view->width * view->channels;
  if (view->height <= 0 || view->width <= 0 || view->channels <= 0 || elements != expected)
    return fail(failure, Problem::kUndecodable,
                fmt::format("raw image has {} values, shape promises {}", elements, expected));
  return true;
}

}  // namespace

bool decode_sample(std::string_view payload, const DecodeOptions& options, uint64_t seed,
                   Sample* out, DecodeFailure* failure) {
  enum { kImage, kLabel, kShape, kFormat };
  const std::array<std::string_view, 4> keys{options.image_key, options.label_key,
                                             options.shape_key, options.format_key};
  std::array<FeatureView, 4> f;
  if (!find_features(payload, keys, f))
    return fail(failure, Problem::kBadExample,
                "payload does not parse as a tf.train.Example protocol buffer");
  std::vector<std::string_view> image, format;
  std::vector<int64_t> label;
  if (!f[kLabel].int64s(&label) || label.size() != 1)
    return fail(failure, Problem::kBadExample,
                fmt::format("no single int64 feature '{}'", options.label_key));
  if (f[kImage].kind == FeatureView::kFloat) {  // float pixels, e.g. converted from HDF5
    std::vector<float> values;
    PixelView view;
    if (!f[kImage].floats(&values))
      return fail(failure, Problem::kBadExample,
                  fmt::format("float feature '{}' is malformed", options.image_key));
    if (!raw_shape(values.size(), f[kShape], &view, failure)) return false;
    view.values = values.data();
    augment(view, options, seed, out);
    out->label = label[0];
    return true;
  }
  if (!f[kImage].bytes(&image) || image.size() != 1)
    return fail(failure, Problem::kBadExample,
                fmt::format("no single bytes feature '{}'", options.image_key));
  // Our converters write "format"; without it (e.g. TF-made shards) sniff the
  // magic bytes. Raw pixels could start like a JPEG by chance, hence "format".
  bool raw =
      f[kFormat].kind != FeatureView::kMissing && f[kFormat].bytes(&format) && format.size() == 1
          ? format[0] == "raw"
          : sniff_image_format(image[0]) == ImageFormat::kUnknown;
  if (raw) {
    PixelView view;
    if (!raw_shape(image[0].size(), f[kShape], &view, failure)) return false;
    view.pixels = reinterpret_cast<const uint8_t*>(image[0].data());
    augment(view, options, seed, out);
  } else {
    std::string error;
    std::optional<Image> decoded = decode_image(image[0], options.channels, &error);
    if (!decoded) return fail(failure, Problem::kUndecodable, error);
    augment(*decoded, options, seed, out);
  }
  out->label = label[0];
  return true;
}

}  // namespace lockstep::data
