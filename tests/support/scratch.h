// Scratch folders for tests that write files (checkpoints, sweeps, example
// outputs). Header-only; not thread-safe (tests create folders from their
// main thread). The folders belong to the process that created them.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace lockstep::testing {

namespace detail {
// Removes its folders when the test process exits, unless a test failed
// (then they are what to look at). Only the creating process removes them:
// a forked worker that happens to run static destructors must not delete
// files its parent still reads. Without this every CI run left its
// checkpoints, sweeps and example outputs in /tmp.
struct ScratchFolders {
  pid_t owner = ::getpid();
  std::vector<std::filesystem::path> dirs;
  ~ScratchFolders() {
    if (::getpid() != owner || ::testing::UnitTest::GetInstance()->Failed()) return;
    std::error_code ec;
    for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};
}  // namespace detail

// An empty folder <tmp>/<prefix>-<pid>-<name>, removed at exit as above.
inline std::filesystem::path scratch_folder(const std::string& prefix, const std::string& name) {
  static detail::ScratchFolders folders;
  auto dir = std::filesystem::temp_directory_path() /
             (prefix + "-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  folders.dirs.push_back(dir);
  return dir;
}

}  // namespace lockstep::testing
