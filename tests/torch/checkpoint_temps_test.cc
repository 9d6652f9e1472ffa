// Clean-up of checkpoint temporary files never removes a live writer's
// (Note [Checkpoint temporary files]). No LibTorch: the clean-up needs none,
// and a test binary without it starts in milliseconds.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "torch/checkpoint_temps.h"
#include "torch/temp_files.h"

namespace lockstep::torch {
namespace {

namespace fs = std::filesystem;
using testing::fresh_dir;
using testing::temps_of;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

void age(const std::string& path, std::chrono::seconds by) {
  timespec times[2];
  times[0].tv_sec = times[1].tv_sec = ::time(nullptr) - by.count();
  times[0].tv_nsec = times[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

TEST(CheckpointTemps, LiveWritersTempIsNeverRemoved) {
  const std::string dir = fresh_dir("ckpt-live");
  const std::string path = dir + "/ckpt.pt";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t writer = fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) {  // a writer in the middle of its write, in another process
    detail::LockedTemp temp = detail::create_locked_temp(path);
    if (::write(temp.fd, "partial", 7) != 7 || ::write(ready[1], "x", 1) != 1) _exit(1);
    for (;;) pause();
  }
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  EXPECT_EQ(detail::remove_stale_temps(path).files, 0u);
  EXPECT_EQ(temps_of(dir, "ckpt.pt").size(), 1u) << "a live writer's temp file was removed";
  kill(writer, SIGKILL);
  waitpid(writer, nullptr, 0);
  EXPECT_EQ(detail::remove_stale_temps(path).files, 1u);  // its writer is gone now
  EXPECT_TRUE(temps_of(dir, "ckpt.pt").empty());
  close(ready[0]);
  close(ready[1]);
  fs::remove_all(dir);
}

// A temp file named for another host (or of the old `.tmp.<pid>` form) may
// belong to a writer whose locks this host cannot see: removed only when it
// has not been written for a minute. Other targets' temp files are not ours.
TEST(CheckpointTemps, ForeignTempsWaitUntilOldAndOtherTargetsAreLeftAlone) {
  const std::string dir = fresh_dir("ckpt-foreign");
  const std::string path = dir + "/ckpt.pt";
  const std::string foreign = dir + "/.ckpt.pt.tmp.other-host.example.4242.0";
  const std::string legacy = dir + "/.ckpt.pt.tmp.4243";
  const std::string other_target = dir + "/.other.pt.tmp.other-host.1.0";
  for (const auto& p : {foreign, legacy, other_target}) write_text(p, "partial");
  EXPECT_EQ(detail::remove_stale_temps(path).files, 0u);
  age(foreign, std::chrono::seconds(120));
  age(legacy, std::chrono::seconds(120));
  age(other_target, std::chrono::seconds(120));
  EXPECT_EQ(detail::remove_stale_temps(path).files, 2u);
  EXPECT_TRUE(temps_of(dir, "ckpt.pt").empty());
  EXPECT_TRUE(fs::exists(other_target));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lockstep::torch
