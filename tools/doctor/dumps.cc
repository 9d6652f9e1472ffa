// Reading flight-recorder dumps and printing the doctor's report.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"
#include "tools/doctor/diagnose.h"

namespace lockstep::doctor {
namespace {

constexpr size_t kShownPerSet = 8;

Operation parse_operation(const nlohmann::json& j) {
  Operation o;
  o.id = j.at("id").get<uint64_t>();
  o.set = j.at("set").get<int>();
  o.seq = j.at("seq").get<int64_t>();
  o.op = j.at("op").get<std::string>();
  o.name = j.at("name").get<std::string>();
  o.dtype = j.value("dtype", "");
  o.state = j.at("state").get<std::string>();
  o.error = j.value("error", "");
  o.error_kind = j.value("error_kind", "");
  o.bytes = j.value("bytes", uint64_t{0});
  o.submitted_us = j.value("submitted_us", int64_t{0});
  o.negotiated_us = j.value("negotiated_us", int64_t{0});
  o.started_us = j.value("started_us", int64_t{0});
  o.finished_us = j.value("finished_us", int64_t{0});
  return o;
}

std::string cell(const Operation* o) {
  if (!o) return "-";
  return fmt::format("{} {}", o->state, o->error_kind.empty() ? "" : "(" + o->error_kind + ")");
}

}  // namespace

RankDump parse_dump(const std::string& json_text, const std::string& file) {
  try {
    nlohmann::json j = nlohmann::json::parse(json_text);
    if (j.value("format", "") != "lockstep-flight-recorder")
      throw Error("not a lockstep flight-recorder dump");
    RankDump d;
    d.file = file;
    d.rank = j.at("rank").get<int>();
    d.size = j.at("size").get<int>();
    d.job_id = j.value("job_id", "");
    d.host = j.value("host", "");
    d.reason = j.value("reason", "");
    d.dumped_us = j.value("dumped_us", int64_t{0});
    for (const auto& o : j.at("operations")) d.operations.push_back(parse_operation(o));
    return d;
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: {}", file, e.what()));
  }
}

std::vector<RankDump> load_dumps(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(
        fmt::format("{} is not a folder; pass the flight-recorder folder the failing "
                    "ranks named (LOCKSTEP_FLIGHT_DIR)",
                    dir));
  std::vector<RankDump> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.rfind("rank", 0) != 0 || e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    out.push_back(parse_dump(text.str(), e.path().string()));
  }
  if (out.empty())
    throw Error(fmt::format("{} holds no flight-recorder dumps (rank<R>.json)", dir));
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  return out;
}

std::string report(const std::vector<RankDump>& dumps, const Diagnosis& diagnosis) {
  std::string out;
  int64_t t0 = INT64_MAX;
  for (const auto& d : dumps) t0 = std::min(t0, d.dumped_us);
  out += fmt::format("{} dump(s), job {}\n\nfailures, in the order they were dumped:\n",
                     dumps.size(), dumps.empty() ? "?" : dumps[0].job_id);
  std::vector<const RankDump*> by_time;
  for (const auto& d : dumps) by_time.push_back(&d);
  std::sort(by_time.begin(), by_time.end(),
            [](auto* a, auto* b) { return a->dumped_us < b->dumped_us; });
  for (const RankDump* d : by_time)
    out += fmt::format("  +{:>8.3f} s  rank {} ({}): {}\n", (d->dumped_us - t0) / 1e6, d->rank,
                       d->host, d->reason);
  // Per set, the newest negotiated operations side by side (the seq is the
  // same on every rank), then what each rank still had pending.
  std::map<int, std::map<int64_t, std::map<int, const Operation*>>> table;
  for (const auto& d : dumps)
    for (const auto& o : d.operations)
      if (o.seq >= 0) table[o.set][o.seq][d.rank] = &o;
  for (const auto& [set, rows] : table) {
    out += fmt::format("\nprocess set {}: the last negotiated operations\n  {:>6}  {:<28}", set,
                       "seq", "operation");
    for (const auto& d : dumps) out += fmt::format("  {:<18}", fmt::format("rank {}", d.rank));
    out += "\n";
    auto it = rows.size() > kShownPerSet ? std::prev(rows.end(), kShownPerSet) : rows.begin();
    for (; it != rows.end(); ++it) {
      const Operation* any = it->second.begin()->second;
      out += fmt::format("  {:>6}  {:<28}", it->first,
                         fmt::format("{} '{}'", any->op, any->name).substr(0, 28));
      for (const auto& d : dumps) {
        auto c = it->second.find(d.rank);
        out += fmt::format("  {:<18}", cell(c == it->second.end() ? nullptr : c->second));
      }
      out += "\n";
    }
  }
  out += "\npending (not negotiated) at the dump:\n";
  for (const auto& d : dumps) {
    std::vector<std::string> names;
    for (const auto& o : d.operations)
      if (o.pending())
        names.push_back(fmt::format("{} '{}' (set {}, {:.1f} s)", o.op, o.name, o.set,
                                    (d.dumped_us - o.submitted_us) / 1e6));
    out += fmt::format("  rank {}: {}\n", d.rank,
                       names.empty() ? "nothing" : fmt::format("{}", fmt::join(names, ", ")));
  }
  out += fmt::format("\ndiagnosis ({}): {}\n", verdict_name(diagnosis.verdict), diagnosis.summary);
  for (size_t i = 1; i < diagnosis.details.size(); ++i) out += "  " + diagnosis.details[i] + "\n";
  return out;
}

}  // namespace lockstep::doctor
