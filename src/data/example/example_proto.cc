// serialize_example / parse_example through the generated tf.train.Example
// protobuf classes (proto/example.proto).
#include "lockstep/data/example.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "example.pb.h"

namespace lockstep::data {
namespace {

void to_proto(const Feature& feature, tensorflow::Feature* out) {
  if (auto* b = std::get_if<BytesList>(&feature)) {
    for (const auto& v : *b) out->mutable_bytes_list()->add_value(v);
  } else if (auto* f = std::get_if<FloatList>(&feature)) {
    out->mutable_float_list()->mutable_value()->Add(f->begin(), f->end());
  } else {
    const auto& i = std::get<Int64List>(feature);
    out->mutable_int64_list()->mutable_value()->Add(i.begin(), i.end());
  }
}

Feature from_proto(const tensorflow::Feature& feature) {
  switch (feature.kind_case()) {
    case tensorflow::Feature::kBytesList: {
      const auto& v = feature.bytes_list().value();
      return BytesList(v.begin(), v.end());
    }
    case tensorflow::Feature::kFloatList: {
      const auto& v = feature.float_list().value();
      return FloatList(v.begin(), v.end());
    }
    case tensorflow::Feature::kInt64List: {
      const auto& v = feature.int64_list().value();
      return Int64List(v.begin(), v.end());
    }
    default: return BytesList{};  // TF treats an unset Feature as an empty list
  }
}

}  // namespace

std::string serialize_example(const Example& example) {
  tensorflow::Example proto;
  auto* map = proto.mutable_features()->mutable_feature();
  for (const auto& [key, feature] : example.features) to_proto(feature, &(*map)[key]);
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);  // sorted map keys: reproducible shards
    proto.SerializeToCodedStream(&coded);
  }
  return out;
}

std::optional<Example> parse_example(std::string_view payload, std::string* error) {
  tensorflow::Example proto;
  if (!proto.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    *error = "payload does not parse as a tf.train.Example protocol buffer";
    return std::nullopt;
  }
  Example out;
  for (const auto& [key, feature] : proto.features().feature())
    out.features.emplace(key, from_proto(feature));
  return out;
}

}  // namespace lockstep::data
