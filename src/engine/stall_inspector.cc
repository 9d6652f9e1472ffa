#include "engine/stall_inspector.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

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
  auto oldest = std::min_element(first_seen_.begin(), first_seen_.end(), [](auto& a, auto& b) {
                  return a.second < b.second;
                })->second;
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

namespace {

// Pending names that the same ranks submitted (and the same ranks did not).
struct StallGroup {
  std::vector<int> have, missing;  // job ranks
  std::vector<const PartialItem*> items;
};

std::vector<StallGroup> group_stall(const CycleResult& result, std::span<const int> global_ranks) {
  std::vector<StallGroup> groups;
  for (const auto& p : result.partial) {
    StallGroup g;
    for (size_t r = 0; r < global_ranks.size(); ++r) {
      bool has = std::find(p.have.begin(), p.have.end(), static_cast<int>(r)) != p.have.end();
      if (has)
        g.have.push_back(global_ranks[r]);
      else if (!result.joined[r])
        g.missing.push_back(global_ranks[r]);
    }
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const StallGroup& o) { return o.have == g.have; });
    if (it == groups.end()) it = groups.insert(groups.end(), std::move(g));
    it->items.push_back(&p);
  }
  // The culprit first: a metric allreduced on rank 0 only is one name
  // against the other ranks' dozens of gradients (issue 30.4: the message
  // listed 7 gradients and "and 73 more", the culprit only in the dump).
  std::stable_sort(groups.begin(), groups.end(), [](const StallGroup& a, const StallGroup& b) {
    return a.items.size() < b.items.size();
  });
  return groups;
}

}  // namespace

std::string describe_stall(const CycleResult& result, std::span<const int> global_ranks,
                           bool deadlock) {
  std::vector<std::string> parts;
  size_t budget = kMaxReported;  // names shown in all; every group shows at least one
  for (const StallGroup& g : group_stall(result, global_ranks)) {
    size_t shown = std::min(g.items.size(), std::max<size_t>(budget, 1));
    budget -= std::min(budget, shown);
    std::string names;
    for (size_t i = 0; i < shown; ++i)
      names += fmt::format("{}{} '{}'", i ? ", " : "", collective_name(g.items[i]->collective),
                           g.items[i]->name);
    if (shown < g.items.size()) names += fmt::format(" and {} more", g.items.size() - shown);
    std::string have = g.have.empty() ? "some ranks" : format_ranks(g.have);
    std::string missing = g.missing.empty() ? "the others" : format_ranks(g.missing);
    if (deadlock)
      parts.push_back(fmt::format("{} {} in {}{}, which {} never submitted", have,
                                  g.have.size() == 1 ? "waits" : "wait",
                                  g.items.size() > 1 ? "one of " : "", names, missing));
    else
      parts.push_back(fmt::format("{} submitted by {} but not by {}", names, have, missing));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace lockstep::engine::detail
