#include "tools/report/inputs.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "tools/report/timeline_summary.h"

namespace lockstep::report {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  return nlohmann::json::parse(in, nullptr, false);
}

// The kind a directory without run.json holds, from its files.
std::string guess_kind(const fs::path& dir) {
  if (fs::exists(dir / "journal.jsonl")) return "sweep";
  if (fs::exists(dir / "results.jsonl")) return "large-batch";
  if (fs::exists(dir / "bench.jsonl")) return "bench";
  if (fs::exists(dir / "metrics.jsonl")) return "train";
  return "";
}

void read_train(const fs::path& dir, nlohmann::json& out) {
  // The files in the directory, else where run.json says (--metrics and
  // --timeline may point elsewhere); a moved directory still reads.
  auto locate = [&](const char* file, const char* key) {
    const auto local = dir / file;
    if (fs::exists(local) || !out["run"].contains(key)) return local.string();
    return out["run"][key].get<std::string>();
  };
  const std::string metrics = locate("metrics.jsonl", "metrics");
  const std::string timeline = locate("timeline.json", "timeline");
  out["metrics"] = read_lines(metrics);
  out["timeline"] = summarize_timeline(timeline);
}

// The journal, and each trial's per-epoch lines (its curves).
void read_sweep(const fs::path& dir, nlohmann::json& out) {
  out["journal"] = read_lines((dir / "journal.jsonl").string());
  out["results"] = read_json(dir / "results.json");
  nlohmann::json curves = nlohmann::json::object();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir / "trials", ec)) {
    const auto metrics = entry.path() / "metrics.jsonl";
    if (!fs::exists(metrics)) continue;
    try {
      curves[std::to_string(std::stoi(entry.path().filename().string()))] =
          read_lines(metrics.string());
    } catch (const std::exception&) {
    }
  }
  out["curves"] = curves;
}

nlohmann::json read_dir(const fs::path& dir) {
  nlohmann::json out = {{"path", dir.string()}, {"name", dir.filename().string()}};
  auto run = read_json(dir / "run.json");
  out["run"] = run.is_object() ? run : nlohmann::json::object();
  std::string kind = out["run"].value("kind", guess_kind(dir));
  if (kind.empty())
    throw InvalidArgument(fmt::format(
        "{}: not a run directory (no run.json, journal.jsonl, metrics.jsonl, results.jsonl or "
        "bench.jsonl); write one with --run-dir (docs/report.md)",
        dir.string()));
  out["kind"] = kind;
  if (kind == "train")
    read_train(dir, out);
  else if (kind == "sweep")
    read_sweep(dir, out);
  else if (kind == "large-batch")
    out["results"] = read_lines((dir / "results.jsonl").string());
  else if (kind == "bench")
    out["bench"] = read_lines((dir / "bench.jsonl").string());
  else if (kind.rfind("lab-", 0) == 0)
    out["lab"] = read_lines((dir / "lab.jsonl").string());
  else
    throw InvalidArgument(fmt::format("{}/run.json: unknown kind '{}'", dir.string(), kind));
  return out;
}

// A loose file: bench lines, `lockstep plan --json` or `plan validate --json`
// lines, metrics lines or a timeline.
nlohmann::json read_file(const fs::path& file) {
  nlohmann::json out = {{"path", file.string()},
                        {"name", file.filename().string()},
                        {"run", nlohmann::json::object()}};
  auto lines = read_lines(file.string());
  if (!lines.empty() && lines[0].contains("efficiency") && lines[0].contains("exposed_comm_ms")) {
    out["kind"] = "plan";
    out["plan"] = lines;
  } else if (!lines.empty() && lines[0].contains("predicted_step_ms") &&
             lines[0].contains("measured_step_ms")) {
    out["kind"] = "plan-validate";
    out["validate"] = lines;
  } else if (!lines.empty() && lines[0].contains("busbw_gbps")) {
    out["kind"] = "bench";
    out["bench"] = lines;
  } else if (!lines.empty() && lines[0].contains("epoch")) {
    out["kind"] = "train";
    out["metrics"] = lines;
    out["timeline"] = nullptr;
  } else if (auto t = summarize_timeline(file.string()); !t.is_null()) {
    out["kind"] = "train";
    out["metrics"] = nlohmann::json::array();
    out["timeline"] = t;
  } else {
    throw InvalidArgument(fmt::format(
        "{}: neither `lockstep bench --json`, `lockstep plan --json` or `plan validate --json` "
        "lines, metrics lines nor a timeline",
        file.string()));
  }
  return out;
}

}  // namespace

nlohmann::json read_lines(const std::string& path) {
  nlohmann::json out = nlohmann::json::array();
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    // `lockstep run -np N` prefixes workers' lines with "[rank]: ".
    if (line.size() > 4 && line[0] == '[' && line.find("]: {") != std::string::npos)
      line.erase(0, line.find("]: {") + 3);
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json read_input(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return read_dir(path);
  if (fs::is_regular_file(path, ec)) return read_file(path);
  throw InvalidArgument(fmt::format("{}: no such file or directory", path));
}

}  // namespace lockstep::report
