#include "tools/report/timeline_summary.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

namespace lockstep::report {
namespace {

struct Span {
  double begin, end;
};

double union_length(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  double total = 0, start = 0, end = -1;
  for (const auto& s : spans) {
    if (s.begin > end) {
      if (end > start) total += end - start;
      start = s.begin;
      end = s.end;
    } else {
      end = std::max(end, s.end);
    }
  }
  if (end > start) total += end - start;
  return total;
}

}  // namespace

nlohmann::json summarize_timeline(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  // One event per line ("[", events ending in ",", the end marker, "]").
  std::map<int, std::string> names;
  std::map<std::string, double> phases;
  struct Tensor {
    double total = 0, collective = 0;
    int count = 0;
  };
  std::map<int, Tensor> tensors;
  std::vector<Span> spans;
  double first = 1e300, last = 0;
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == ',' || line.back() == '\r')) line.pop_back();
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_object()) continue;
    const std::string ph = e.value("ph", "");
    const int tid = e.value("tid", 0);
    if (ph == "M" && e.value("name", "") == "thread_name") {
      names[tid] = e["args"].value("name", "?");
    } else if (ph == "X") {
      const double ts = e.value("ts", 0.0), dur = e.value("dur", 0.0);
      const std::string name = e.value("name", "?");
      phases[name] += dur;
      auto& t = tensors[tid];
      t.total += dur;
      if (name == "COLLECTIVE") t.collective += dur, ++t.count;
      spans.push_back({ts, ts + dur});
      first = std::min(first, ts);
      last = std::max(last, ts + dur);
    }
  }
  if (spans.empty()) return nullptr;
  std::vector<std::pair<int, Tensor>> order(tensors.begin(), tensors.end());
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
  nlohmann::json top = nlohmann::json::array();
  for (size_t i = 0; i < order.size() && i < 10; ++i)
    top.push_back({{"name", names.count(order[i].first) ? names[order[i].first] : "?"},
                   {"total_us", order[i].second.total},
                   {"collective_us", order[i].second.collective},
                   {"count", order[i].second.count}});
  return {{"span_us", last - first},
          {"busy_us", union_length(spans)},
          {"phases", phases},
          {"top", top}};
}

}  // namespace lockstep::report
