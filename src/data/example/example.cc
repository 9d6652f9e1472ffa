// tf.train.Example's plain C++ side; its protobuf encoding is example_proto.cc
// (or example_noproto.cc in builds without protobuf, docs/gpu.md).
#include "lockstep/data/example.h"

namespace lockstep::data {
namespace {

template <typename List>
const List* get(const Example& example, const std::string& key) {
  auto it = example.features.find(key);
  return it == example.features.end() ? nullptr : std::get_if<List>(&it->second);
}

}  // namespace

Example& Example::set_bytes(const std::string& key, std::string value) {
  features[key] = BytesList{std::move(value)};
  return *this;
}
Example& Example::set_int64s(const std::string& key, Int64List values) {
  features[key] = std::move(values);
  return *this;
}
Example& Example::set_floats(const std::string& key, FloatList values) {
  features[key] = std::move(values);
  return *this;
}
const BytesList* Example::bytes(const std::string& key) const { return get<BytesList>(*this, key); }
const Int64List* Example::int64s(const std::string& key) const {
  return get<Int64List>(*this, key);
}
const FloatList* Example::floats(const std::string& key) const {
  return get<FloatList>(*this, key);
}

}  // namespace lockstep::data
