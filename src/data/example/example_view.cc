#include "data/example/example_view.h"

#include <cstring>

#include "lockstep/base/protowire.h"

namespace lockstep::data {
namespace {

using protowire::kFixed32;
using protowire::kLengthDelimited;
using protowire::kVarint;
using Wire = protowire::Reader;  // the shared codec (lockstep/base/protowire.h)

// Feature: oneof {BytesList=1, FloatList=2, Int64List=3}; the last one set wins.
bool parse_feature(std::string_view data, FeatureView* out) {
  Wire w(data);
  *out = FeatureView{};
  out->kind = FeatureView::kBytes;  // an unset Feature reads as an empty list
  while (!w.done()) {
    uint32_t field, wire;
    if (!w.tag(&field, &wire)) return false;
    if (field >= 1 && field <= 3 && wire == kLengthDelimited) {
      if (!w.bytes(&out->list)) return false;
      out->kind = static_cast<FeatureView::Kind>(field);
    } else if (!w.skip(wire)) {
      return false;
    }
  }
  return true;
}

// Features map entry: key=1, value=2.
bool parse_entry(std::string_view data, std::span<const std::string_view> keys,
                 std::span<FeatureView> out) {
  Wire w(data);
  std::string_view key, value;
  bool has_value = false;
  while (!w.done()) {
    uint32_t field, wire;
    if (!w.tag(&field, &wire)) return false;
    if (field == 1 && wire == kLengthDelimited) {
      if (!w.bytes(&key)) return false;
    } else if (field == 2 && wire == kLengthDelimited) {
      if (!w.bytes(&value)) return false;
      has_value = true;
    } else if (!w.skip(wire)) {
      return false;
    }
  }
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) {
      if (!has_value)
        out[i] = FeatureView{FeatureView::kBytes, {}};
      else if (!parse_feature(value, &out[i]))
        return false;
    }
  return true;
}

bool parse_features(std::string_view data, std::span<const std::string_view> keys,
                    std::span<FeatureView> out) {
  Wire w(data);
  while (!w.done()) {
    uint32_t field, wire;
    std::string_view entry;
    if (!w.tag(&field, &wire)) return false;
    if (field == 1 && wire == kLengthDelimited) {
      if (!w.bytes(&entry) || !parse_entry(entry, keys, out)) return false;
    } else if (!w.skip(wire)) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool find_features(std::string_view example, std::span<const std::string_view> keys,
                   std::span<FeatureView> out) {
  for (auto& f : out) f = FeatureView{};
  Wire w(example);
  while (!w.done()) {
    uint32_t field, wire;
    std::string_view features;
    if (!w.tag(&field, &wire)) return false;
    if (field == 1 && wire == kLengthDelimited) {
      if (!w.bytes(&features) || !parse_features(features, keys, out)) return false;
    } else if (!w.skip(wire)) {
      return false;
    }
  }
  return true;
}

bool FeatureView::bytes(std::vector<std::string_view>* out) const {
  out->clear();
  if (kind != kBytes) return false;
  Wire w(list);
  while (!w.done()) {
    uint32_t field, wire;
    std::string_view value;
    if (!w.tag(&field, &wire)) return false;
    if (field == 1 && wire == kLengthDelimited) {
      if (!w.bytes(&value)) return false;
      out->push_back(value);
    } else if (!w.skip(wire)) {
      return false;
    }
  }
  return true;
}

bool FeatureView::int64s(std::vector<int64_t>* out) const {
  out->clear();
  if (kind != kInt64) return false;
  Wire w(list);
  while (!w.done()) {
    uint32_t field, wire;
    uint64_t v;
    if (!w.tag(&field, &wire)) return false;
    if (field == 1 && wire == kLengthDelimited) {  // packed
      std::string_view packed;
      if (!w.bytes(&packed)) return false;
      for (Wire p(packed); !p.done();) {
        if (!p.varint(&v)) return false;
        out->push_back(static_cast<int64_t>(v));
      }
    } else if (field == 1 && wire == kVarint) {  // unpacked
      if (!w.varint(&v)) return false;
      out->push_back(static_cast<int64_t>(v));
    } else if (!w.skip(wire)) {
      return false;
    }
  }
  return true;
}

}  // namespace lockstep::data

namespace lockstep::data {

bool FeatureView::floats(std::vector<float>* out) const {
  out->clear();
  if (kind != kFloat) return false;
  Wire w(list);
  while (!w.done()) {
    uint32_t field, wire, bits;
    if (!w.tag(&field, &wire)) return false;
    if (field == 1 && wire == kLengthDelimited) {  // packed
      std::string_view packed;
      if (!w.bytes(&packed) || packed.size() % 4 != 0) return false;
      size_t at = out->size();
      out->resize(at + packed.size() / 4);
      std::memcpy(out->data() + at, packed.data(), packed.size());
    } else if (field == 1 && wire == kFixed32) {  // unpacked
      if (!w.fixed32(&bits)) return false;
      float v;
      std::memcpy(&v, &bits, 4);
      out->push_back(v);
    } else if (!w.skip(wire)) {
      return false;
    }
  }
  return true;
}

}  // namespace lockstep::data
