// Running the example binaries as a user does: subprocesses from
// ${LOCKSTEP_BIN_DIR}, a scratch folder, their metrics files and stderr.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/scratch.h"

namespace lockstep::testing {

namespace fs = std::filesystem;

inline std::string bin(const std::string& name) {
  const char* dir = std::getenv("LOCKSTEP_BIN_DIR");
  return (fs::path(dir ? dir : ".") / name).string();
}

// The main job's executable.
inline std::string main_job() { return bin("lockstep-fashion-mnist"); }

inline bool have_dataset() {
  return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

inline fs::path scratch(const std::string& name) {
  return lockstep::testing::scratch_folder("lockstep-example", name);
}

// The metrics file's lines: the epoch lines (and the target line) by
// default, the per-step rows ("kind": "step", --log-every) with steps=true.
inline std::vector<nlohmann::json> read_metrics(const fs::path& path, bool steps = false) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if ((j.value("kind", "") == "step") == steps) lines.push_back(std::move(j));
  }
  return lines;
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// std::system's status as the program's exit code (-1 when it did not exit).
inline int exit_code(const std::string& cmd) {
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace lockstep::testing
