#include "engine/stall_inspector.h"

#include <algorithm>

#include <fmt/format.h>

namespace lockstep::engine::detail {
namespace {

constexpr size_t kMaxReported = 8;

double seconds(StallInspector::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

StallAction StallInspector::observe(const CycleResult& result, Clock::time_point now) {
  if (result.stall_report) {
    // The action we asked for just ran; start timing afresh.
    requested_ = false;
    if (result.stall_action == StallAction::kAbort) first_seen_.clear();
  }
  std::unordered_map<std::string, Clock::time_point> still;
  for (const auto& p : result.partial) {
    auto it = first_seen_.find(p.name);
    still[p.name] = it == first_seen_.end() ? now : it->second;
  }
  first_seen_ = std::move(still);
  if (first_seen_.empty()) report_interval_s_ = warning_s_;  // the next stall starts afresh
  if (requested_ || first_seen_.empty()) return StallAction::kNone;
  auto oldest = std::min_element(first_seen_.begin(), first_seen_.end(),
                                 [](auto& a, auto& b) { return a.second < b.second; })->second;
  double age = seconds(now - oldest);
  if (timeout_s_ > 0 && age >= timeout_s_) {
    requested_ = true;
    return StallAction::kAbort;
  }
  if (warning_s_ > 0 && age >= warning_s_ && seconds(now - last_report_) >= report_interval_s_) {
    requested_ = true;
    last_report_ = now;
    report_interval_s_ *= 2;  // until this stall clears
    return StallAction::kReport;
  }
  return StallAction::kNone;
}

std::string describe_stall(const CycleResult& result, std::span<const int> global_ranks) {
  std::string out;
  size_t shown = 0;
  for (const auto& p : result.partial) {
    if (shown == kMaxReported) {
      out += fmt::format("; and {} more", result.partial.size() - shown);
      break;
    }
    std::vector<int> have, missing;
    for (size_t r = 0; r < global_ranks.size(); ++r) {
      bool has = std::find(p.have.begin(), p.have.end(), static_cast<int>(r)) != p.have.end();
      if (has) have.push_back(global_ranks[r]);
      else if (!result.joined[r]) missing.push_back(global_ranks[r]);
    }
    out += fmt::format("{}{} '{}' submitted by {} but not by {}", shown ? "; " : "",
                       collective_name(p.collective), p.name,
                       have.empty() ? "some ranks" : format_ranks(have),
                       missing.empty() ? "the others" : format_ranks(missing));
    ++shown;
  }
  return out;
}

}  // namespace lockstep::engine::detail
