// TensorBoard's HParams plugin records (tensorboard/plugins/hparams:
// plugin_data.proto, api.proto), encoded by hand. The plugin's layout:
//
//   - one Experiment (the hyper-parameters with their domains, the metrics)
//     under tag "_hparams_/experiment", in the top directory's run;
//   - per trial ("session"), in the trial's own directory (its run):
//     SessionStartInfo (its hyper-parameter values) under
//     "_hparams_/session_start_info", the metric as scalars with the tag the
//     Experiment names, and SessionEndInfo (its status) under
//     "_hparams_/session_end_info".
//
// `lockstep sweep --dir` writes these (docs/sweep.md, docs/report.md).
// Plain values and pure functions: thread-safe.
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/summary/summary.h"

namespace lockstep::summary::hparams {

using Value = std::variant<double, std::string, bool>;

struct HParam {
  std::string name;
  std::string description;
  std::vector<Value> choices;  // a discrete domain; empty: use [min, max]
  bool is_string = false;      // with no choices: the values are strings
  double min = 0, max = 0;     // an interval domain when min < max
};

struct Metric {
  std::string tag;  // the scalar tag each session writes the metric under
  std::string display_name;
  std::string description;
};

struct Experiment {
  std::string name;
  std::string description;  // markdown
  double time_created_secs = 0;
  std::vector<HParam> hparams;
  std::vector<Metric> metrics;
};

// The plugin's session status (api.proto Status).
enum class Status { kUnknown = 0, kSuccess = 1, kFailure = 2, kRunning = 3 };

inline constexpr const char* kExperimentTag = "_hparams_/experiment";
inline constexpr const char* kSessionStartTag = "_hparams_/session_start_info";
inline constexpr const char* kSessionEndTag = "_hparams_/session_end_info";

Summary experiment(const Experiment& e);
// `group` names the session group (empty: the session is its own group).
Summary session_start(const std::map<std::string, Value>& values, double start_time_secs,
                      const std::string& group = "");
Summary session_end(Status status, double end_time_secs);

}  // namespace lockstep::summary::hparams
