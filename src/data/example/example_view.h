// Internal: a zero-copy reader of serialized tf.train.Example, for the decode
// hot loop. The generated protobuf classes build a std::map and copy every
// feature; this walks the wire format once and returns views into the
// payload. Handles packed and unpacked repeated scalars and skips unknown
// fields; parse_example (protobuf proper) stays the reference, and the tests
// check both agree.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace lockstep::data {

struct FeatureView {
  enum Kind { kMissing = 0, kBytes = 1, kFloat = 2, kInt64 = 3 };
  Kind kind = kMissing;
  std::string_view list;  // the serialized BytesList / FloatList / Int64List

  // The values, or false when the kind differs or the list is malformed.
  bool bytes(std::vector<std::string_view>* out) const;
  bool int64s(std::vector<int64_t>* out) const;
  bool floats(std::vector<float>* out) const;
};

// Looks up `keys` (out[i] for keys[i]; kMissing when absent). False when the
// payload is not well-formed protobuf wire data.
bool find_features(std::string_view example, std::span<const std::string_view> keys,
                   std::span<FeatureView> out);

}  // namespace lockstep::data
