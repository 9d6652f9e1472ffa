// tf.train.Example as plain C++ values, so callers never include generated
// protobuf headers. Serialisation is deterministic (map keys sorted), so the
// same input always gives byte-identical shards. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace lockstep::data {

using BytesList = std::vector<std::string>;
using FloatList = std::vector<float>;
using Int64List = std::vector<int64_t>;
using Feature = std::variant<BytesList, FloatList, Int64List>;

struct Example {
  std::map<std::string, Feature> features;

  Example& set_bytes(const std::string& key, std::string value);
  Example& set_int64s(const std::string& key, Int64List values);
  Example& set_floats(const std::string& key, FloatList values);

  // nullptr when the key is missing or holds another kind.
  const BytesList* bytes(const std::string& key) const;
  const Int64List* int64s(const std::string& key) const;
  const FloatList* floats(const std::string& key) const;
};

std::string serialize_example(const Example& example);

// nullopt plus *error when `payload` is not a valid tf.train.Example.
std::optional<Example> parse_example(std::string_view payload, std::string* error);

}  // namespace lockstep::data
