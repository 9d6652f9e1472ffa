#include "tools/sweep/tensorboard.h"

#include <cmath>

#include "lockstep/summary/hparams.h"

namespace lockstep::sweep {
namespace {

namespace hp = summary::hparams;

hp::Value to_value(const nlohmann::json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>();
  return v.is_string() ? v.get<std::string>() : v.dump();
}

hp::HParam to_hparam(const Param& p) {
  hp::HParam h;
  h.name = p.name;
  if (p.type == ParamType::kChoice) {
    for (const auto& v : p.values) h.choices.push_back(to_value(v));
    h.description = "choice";
  } else {
    h.min = p.low;
    h.max = p.high;
    h.description = p.type == ParamType::kLogUniform ? "log-uniform"
                    : p.type == ParamType::kInt      ? (p.log ? "integer, log-uniform" : "integer")
                                                     : "uniform";
  }
  return h;
}

// Early stopping (ASHA) is a result, not a failure; the plugin has no
// "stopped", so the table tells them apart by sweep/epochs.
hp::Status to_status(Status s) {
  switch (s) {
    case Status::kCompleted:
    case Status::kStopped: return hp::Status::kSuccess;
    case Status::kFailed:
    case Status::kTimeout: return hp::Status::kFailure;
    case Status::kRunning: return hp::Status::kRunning;
    case Status::kPending: break;
  }
  return hp::Status::kUnknown;
}

}  // namespace

SweepEvents::SweepEvents(const std::string& dir, const Space& space, const std::string& metric,
                         const std::string& description)
    : metric_(metric), top_(dir, "sweep") {
  hp::Experiment e;
  e.description = description;
  e.time_created_secs = summary::EventWriter::now();
  for (const auto& p : space.params()) e.hparams.push_back(to_hparam(p));
  e.metrics.push_back({.tag = metric_tag(),
                       .display_name = metric,
                       .description = "the sweep's metric, last reported epoch"});
  e.metrics.push_back(
      {.tag = "sweep/epochs",
       .display_name = "epochs",
       .description = "epochs the trial reported (fewer: stopped early or failed)"});
  top_.write(0, hp::experiment(e));
}

void SweepEvents::started(const Trial& t) {
  trials_.erase(t.id);  // a retry starts a new file with a new session
  auto [it, added] = trials_.emplace(t.id, summary::EventWriter(t.dir, "sweep"));
  std::map<std::string, hp::Value> values;
  for (auto p = t.params.begin(); p != t.params.end(); ++p) values[p.key()] = to_value(p.value());
  it->second.write(0, hp::session_start(values, summary::EventWriter::now()));
}

void SweepEvents::reported(const Trial& t, int epoch, double value) {
  auto it = trials_.find(t.id);
  if (it == trials_.end() || !std::isfinite(value)) return;
  it->second.write(epoch, summary::Summary().scalar(metric_tag(), value));
}

void SweepEvents::ended(const Trial& t) {
  auto it = trials_.find(t.id);
  if (it == trials_.end()) return;
  it->second.write(t.epochs, summary::Summary().scalar("sweep/epochs", t.epochs));
  it->second.write(t.epochs, hp::session_end(to_status(t.status), summary::EventWriter::now()));
  trials_.erase(it);
}

}  // namespace lockstep::sweep
