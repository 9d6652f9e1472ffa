// A run directory: what a program writes for `lockstep report` when asked
// with `--run-dir DIR` (docs/report.md, "Run directories").
//
//   DIR/run.json        {"kind": ..., "program": ..., "argv": [...], "started": ...}
//   DIR/<name>.jsonl    JSON lines the program appends (metrics, results, ...)
//
// `kind` tells the report which charts to draw ("train", "large-batch",
// "lab-gd", ...). Appends are one write(2) on an O_APPEND descriptor, so a
// line is never torn by another process appending to the same file, and a
// killed writer loses at most the line it was writing.
//
// Not thread-safe; one RunDir per process. Owns nothing but its path.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"

namespace lockstep::examples {

class RunDir {
 public:
  RunDir() = default;
  // Creates DIR if needed and (re)writes DIR/run.json. An empty dir means
  // "not asked": every method is then a no-op.
  RunDir(std::string dir, const std::string& kind, int argc, char** argv,
         nlohmann::json extra = nlohmann::json::object())
      : dir_(std::move(dir)) {
    if (dir_.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec)
      throw InvalidArgument(fmt::format("--run-dir {}: cannot create it: {}", dir_, ec.message()));
    nlohmann::json run = std::move(extra);
    run["kind"] = kind;
    run["program"] = argc > 0 ? argv[0] : "";
    run["argv"] = std::vector<std::string>(argv, argv + argc);
    run["started"] =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    write_file("run.json", run.dump(2) + "\n");
  }

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // Appends one JSON line to DIR/<name> in a single write(2).
  void append(const std::string& name, const nlohmann::json& line) const {
    if (!enabled()) return;
    append_line(path(name), line);
  }

  static void append_line(const std::string& file, const nlohmann::json& line) {
    const std::string text = line.dump() + "\n";
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
      throw Error(fmt::format("cannot open {} for appending: {}", file, std::strerror(errno)));
    const ssize_t n = ::write(fd, text.data(), text.size());
    const int saved = errno;
    ::close(fd);
    if (n != static_cast<ssize_t>(text.size()))
      throw Error(fmt::format("short write to {}: {}", file, std::strerror(saved)));
  }

  // Every JSON line of DIR/<name> that parses (a torn last line is skipped).
  std::vector<nlohmann::json> read_lines(const std::string& name) const {
    std::vector<nlohmann::json> out;
    if (!enabled()) return out;
    std::ifstream in(path(name));
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object()) out.push_back(std::move(j));
    }
    return out;
  }

 private:
  void write_file(const std::string& name, const std::string& text) const {
    const std::string tmp = path(name + ".tmp");
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, path(name));
  }

  std::string dir_;
};

}  // namespace lockstep::examples
