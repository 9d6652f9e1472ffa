// `lockstep plan validate`'s schedule and its error arithmetic, kept apart
// from the tool so that both are tested without running anything.
//
// The schedule interleaves the np 1 profile with the measured points: every
// point's measurement runs right after a profile (and, for shared memory at
// np > 1, a fit and a co-location calibration) of its own, round after
// round (np 1, np 2, np 1, np 2, ...). This VM switches between two speed states that last seconds;
// a prediction made from a profile minutes away from its measurement would
// report the state change as model error (docs/plan.md, section 4).
//
// Plain values and pure functions: thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::plan {

// One validated point: `np` ranks over `hosts` hosts (1: shared memory on
// this host) on `network` ("none" at np 1, "shm", or "gloo <shape>").
struct ValidationPoint {
  int np = 1;
  int hosts = 1;
  std::string network = "none";
  bool fit_shm = false;    // fit shared memory at np before measuring
  bool calibrate = false;  // run a co-location calibration before measuring
  bool netns() const { return hosts > 1; }
};

struct ScheduledRun {
  enum class Kind {
    kFitShm,     // fit shared memory at the point's np (every round: states change)
    kFitNetns,   // fit Gloo over one shaped link (first round only; point names the shape)
    kProfile,    // the np 1 profile the next measurement is predicted from
    kCalibrate,  // compute at the point's np beside the other ranks
    kMeasure,    // the point itself
  };
  Kind kind = Kind::kMeasure;
  int round = 0;
  int point = -1;  // index into the points
};

std::string_view to_string(ScheduledRun::Kind kind);

// The runs of `rounds` rounds over `points`, in order: per point a profile,
// then (where the point asks) a shared-memory fit and a calibration, then
// the measurement. Each shaped link is fitted once, just before its first
// point's profile (a Gloo fit over a shaped link takes long, and the wire's
// rate does not change with the VM's state).
std::vector<ScheduledRun> validation_schedule(const std::vector<ValidationPoint>& points,
                                              int rounds);

// The errors of one point over its rounds. Error = (predicted - measured) /
// measured, in percent, per round (each round's prediction comes from the
// profile taken next to that round's measurement); the headline is their
// median, with the spread as min and max.
struct RoundErrors {
  std::vector<double> error_pct;  // per round
  double median_error_pct = 0;
  double min_error_pct = 0;
  double max_error_pct = 0;
  double median_measured_ms = 0;
  double median_predicted_ms = 0;
  int rounds_within(double pct) const;  // rounds with |error| <= pct
};

// Throws InvalidArgument when the vectors differ in length or a
// measurement is not positive.
RoundErrors round_errors(const std::vector<double>& measured_ms,
                         const std::vector<double>& predicted_ms);

// The overlap a netns point runs and is predicted with. Namespace hosts
// whose training threads fill this machine's cores leave the engine's
// threads no core during backward: with overlap on, that measures the
// scheduler, so a requested "auto" (which turns overlap on across hosts)
// becomes "off" there. An explicit on or off is kept.
std::string netns_overlap(std::string_view requested, bool hosts_fill_cores);

// CONFIG_HZ from a kernel configuration's text (/proc/config.gz
// uncompressed, or /boot/config-RELEASE); nullopt when it is not there.
std::optional<int> kernel_hz_from_config(std::string_view config_text);

}  // namespace lockstep::plan
