// Field numbers: tensorflow/core/framework/summary.proto (Summary, Value,
// SummaryMetadata, PluginData), tensor.proto and types.proto (DataType).
#include "lockstep/summary/summary.h"

#include "summary/wire.h"

namespace lockstep::summary {
namespace {

namespace w = wire;

// Summary.Value
constexpr uint32_t kValueTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9;
// SummaryMetadata and its PluginData
constexpr uint32_t kPluginData = 1, kDataClass = 4, kPluginName = 1, kPluginContent = 2;
constexpr uint64_t kDataClassTensor = 2;
// TensorProto
constexpr uint32_t kDtype = 1, kShape = 2, kFloatVal = 5, kStringVal = 8;
constexpr uint64_t kDtFloat = 1, kDtString = 7;

std::string metadata(std::string_view plugin, std::string_view content) {
  std::string data;
  w::field_bytes(data, kPluginName, plugin);
  if (!content.empty()) w::field_bytes(data, kPluginContent, content);
  std::string m;
  w::field_bytes(m, kPluginData, data);
  w::field_varint(m, kDataClass, kDataClassTensor);
  return m;
}

// A scalar tensor: dtype, an empty shape (rank 0), then its one value.
std::string scalar_tensor(uint64_t dtype, const std::string& value_field) {
  std::string t;
  w::field_varint(t, kDtype, dtype);
  w::field_bytes(t, kShape, "");
  t += value_field;
  return t;
}

}  // namespace

Summary& Summary::scalar(std::string_view tag, double value) {
  std::string v;
  w::field_bytes(v, kValueTag, tag);
  w::field_float(v, kSimpleValue, static_cast<float>(value));
  w::field_bytes(bytes_, 1, v);
  ++values_;
  return *this;
}

Summary& Summary::text(std::string_view tag, std::string_view markdown) {
  std::string value;
  w::field_bytes(value, kStringVal, markdown);
  std::string v;
  w::field_bytes(v, kValueTag, tag);
  w::field_bytes(v, kMetadata, metadata("text", ""));
  w::field_bytes(v, kTensor, scalar_tensor(kDtString, value));
  w::field_bytes(bytes_, 1, v);
  ++values_;
  return *this;
}

Summary& Summary::plugin_value(std::string_view tag, std::string_view plugin,
                               std::string_view content) {
  std::string packed;  // float_val is packed: one length-delimited run of floats
  w::raw_float(packed, 0.0f);
  std::string zero;
  w::field_bytes(zero, kFloatVal, packed);
  std::string v;
  w::field_bytes(v, kValueTag, tag);
  w::field_bytes(v, kMetadata, metadata(plugin, content));
  w::field_bytes(v, kTensor, scalar_tensor(kDtFloat, zero));
  w::field_bytes(bytes_, 1, v);
  ++values_;
  return *this;
}

}  // namespace lockstep::summary
