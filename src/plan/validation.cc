#include "lockstep/plan/validation.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/plan/stats.h"

namespace lockstep::plan {

std::string_view to_string(ScheduledRun::Kind kind) {
  switch (kind) {
    case ScheduledRun::Kind::kFitShm: return "fit-shm";
    case ScheduledRun::Kind::kFitNetns: return "fit-netns";
    case ScheduledRun::Kind::kProfile: return "profile";
    case ScheduledRun::Kind::kCalibrate: return "calibrate";
    case ScheduledRun::Kind::kMeasure: return "measure";
  }
  return "?";
}

std::vector<ScheduledRun> validation_schedule(const std::vector<ValidationPoint>& points,
                                              int rounds) {
  if (rounds < 1) throw InvalidArgument(fmt::format("--rounds {} must be >= 1", rounds));
  using Kind = ScheduledRun::Kind;
  std::vector<ScheduledRun> runs;
  std::set<std::string> fitted;  // shaped links fitted so far
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < static_cast<int>(points.size()); ++i) {
      const ValidationPoint& p = points[i];
      // The link's fit goes before the profile, so that the profile stays
      // next to the measurement.
      if (p.netns() && fitted.insert(p.network).second) runs.push_back({Kind::kFitNetns, round, i});
      runs.push_back({Kind::kProfile, round, i});
      if (p.fit_shm) runs.push_back({Kind::kFitShm, round, i});
      if (p.calibrate) runs.push_back({Kind::kCalibrate, round, i});
      runs.push_back({Kind::kMeasure, round, i});
    }
  }
  return runs;
}

std::string netns_overlap(std::string_view requested, bool hosts_fill_cores) {
  if (requested == "auto" && hosts_fill_cores) return "off";
  return std::string(requested);
}

int RoundErrors::rounds_within(double pct) const {
  return static_cast<int>(std::count_if(error_pct.begin(), error_pct.end(),
                                        [&](double e) { return std::abs(e) <= pct; }));
}

RoundErrors round_errors(const std::vector<double>& measured_ms,
                         const std::vector<double>& predicted_ms) {
  if (measured_ms.size() != predicted_ms.size())
    throw InvalidArgument(fmt::format("{} measured rounds but {} predicted", measured_ms.size(),
                                      predicted_ms.size()));
  RoundErrors r;
  for (size_t i = 0; i < measured_ms.size(); ++i) {
    if (!(measured_ms[i] > 0))
      throw InvalidArgument(
          fmt::format("round {}: measured step {} ms is not positive", i + 1, measured_ms[i]));
    r.error_pct.push_back(100 * (predicted_ms[i] - measured_ms[i]) / measured_ms[i]);
  }
  if (r.error_pct.empty()) return r;
  r.median_error_pct = detail::median(r.error_pct);
  r.min_error_pct = *std::min_element(r.error_pct.begin(), r.error_pct.end());
  r.max_error_pct = *std::max_element(r.error_pct.begin(), r.error_pct.end());
  r.median_measured_ms = detail::median(measured_ms);
  r.median_predicted_ms = detail::median(predicted_ms);
  return r;
}

std::optional<int> kernel_hz_from_config(std::string_view text) {
  constexpr std::string_view key = "CONFIG_HZ=";
  size_t at = 0;
  while ((at = text.find(key, at)) != std::string_view::npos) {
    // Only at the start of a line: CONFIG_HZ_250=y and comments do not count.
    if (at == 0 || text[at - 1] == '\n') {
      const char* first = text.data() + at + key.size();
      const char* last = text.data() + text.size();
      int hz = 0;
      auto [end, ec] = std::from_chars(first, last, hz);
      if (ec == std::errc() && hz > 0 && (end == last || *end == '\n' || *end == '\r')) return hz;
    }
    at += key.size();
  }
  return std::nullopt;
}

}  // namespace lockstep::plan
