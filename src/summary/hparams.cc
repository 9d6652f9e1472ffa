// Field numbers: tensorboard/plugins/hparams/plugin_data.proto
// (HParamsPluginData, SessionStartInfo, SessionEndInfo), api.proto
// (Experiment, HParamInfo, Interval, MetricInfo, MetricName, DataType) and
// google/protobuf/struct.proto (Value, ListValue).
#include "lockstep/summary/hparams.h"

#include "summary/wire.h"

namespace lockstep::summary::hparams {
namespace {

namespace w = wire;

constexpr const char* kPlugin = "hparams";
// HParamsPluginData
constexpr uint32_t kVersion = 1, kExperiment = 2, kSessionStart = 3, kSessionEnd = 4;
// google.protobuf.Value / ListValue
constexpr uint32_t kNumberValue = 2, kStringValue = 3, kBoolValue = 4, kListValues = 1;
// DataType
constexpr uint64_t kTypeString = 1, kTypeBool = 2, kTypeFloat64 = 3;

std::string value(const Value& v) {
  std::string out;
  if (const auto* d = std::get_if<double>(&v))
    w::field_double(out, kNumberValue, *d);
  else if (const auto* s = std::get_if<std::string>(&v))
    w::field_bytes(out, kStringValue, *s);
  else
    w::field_varint(out, kBoolValue, std::get<bool>(v) ? 1 : 0);
  return out;
}

uint64_t data_type(const HParam& h) {
  const Value* sample = h.choices.empty() ? nullptr : &h.choices.front();
  if (sample ? std::holds_alternative<std::string>(*sample) : h.is_string) return kTypeString;
  if (sample && std::holds_alternative<bool>(*sample)) return kTypeBool;
  return kTypeFloat64;
}

std::string hparam_info(const HParam& h) {
  std::string out;
  w::field_bytes(out, 1, h.name);
  if (!h.description.empty()) w::field_bytes(out, 3, h.description);
  w::field_varint(out, 4, data_type(h));
  if (!h.choices.empty()) {
    std::string list;
    for (const auto& c : h.choices) w::field_bytes(list, kListValues, value(c));
    w::field_bytes(out, 5, list);  // domain_discrete
  } else if (h.min < h.max) {
    std::string interval;
    w::field_double(interval, 1, h.min);
    w::field_double(interval, 2, h.max);
    w::field_bytes(out, 6, interval);  // domain_interval
  }
  return out;
}

std::string metric_info(const Metric& m) {
  std::string name;
  w::field_bytes(name, 2, m.tag);  // MetricName.tag; group "" is the session's own run
  std::string out;
  w::field_bytes(out, 1, name);
  if (!m.display_name.empty()) w::field_bytes(out, 3, m.display_name);
  if (!m.description.empty()) w::field_bytes(out, 4, m.description);
  return out;
}

// A Summary holding HParamsPluginData{version 0, <field>: message}.
Summary plugin_summary(const char* tag, uint32_t field, const std::string& message) {
  std::string data;
  w::field_varint(data, kVersion, 0);
  w::field_bytes(data, field, message);
  Summary s;
  s.plugin_value(tag, kPlugin, data);
  return s;
}

}  // namespace

Summary experiment(const Experiment& e) {
  std::string out;
  if (!e.description.empty()) w::field_bytes(out, 1, e.description);
  if (e.time_created_secs > 0) w::field_double(out, 3, e.time_created_secs);
  for (const auto& h : e.hparams) w::field_bytes(out, 4, hparam_info(h));
  for (const auto& m : e.metrics) w::field_bytes(out, 5, metric_info(m));
  if (!e.name.empty()) w::field_bytes(out, 6, e.name);
  return plugin_summary(kExperimentTag, kExperiment, out);
}

Summary session_start(const std::map<std::string, Value>& values, double start_time_secs,
                      const std::string& group) {
  std::string out;
  for (const auto& [name, v] : values) {  // map<string, Value>: entries {1: key, 2: value}
    std::string entry;
    w::field_bytes(entry, 1, name);
    w::field_bytes(entry, 2, value(v));
    w::field_bytes(out, 1, entry);
  }
  if (!group.empty()) w::field_bytes(out, 4, group);
  w::field_double(out, 5, start_time_secs);
  return plugin_summary(kSessionStartTag, kSessionStart, out);
}

Summary session_end(Status status, double end_time_secs) {
  std::string out;
  w::field_varint(out, 1, static_cast<uint64_t>(status));
  w::field_double(out, 2, end_time_secs);
  return plugin_summary(kSessionEndTag, kSessionEnd, out);
}

}  // namespace lockstep::summary::hparams
