// Helpers for the checkpoint temp-file tests: a fresh folder and the temp
// files of one target in it.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace lockstep::torch::testing {

namespace fs = std::filesystem;

inline std::string fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / fmt::format("lockstep-{}-{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

inline std::vector<std::string> temps_of(const std::string& dir, const std::string& file) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("." + file + ".tmp.", 0) == 0)
      out.push_back(e.path().filename().string());
  return out;
}

}  // namespace lockstep::torch::testing
