#include "launcher/launch_helper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include <gtest/gtest.h>

namespace lockstep::testing {
namespace {

using Clock = std::chrono::steady_clock;

size_t count_of(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1))
    ++n;
  return n;
}

// One poll round over the open streams; false when both are closed.
bool pump(Launch& l, Clock::time_point deadline) {
  pollfd fds[2] = {{l.out_fd, POLLIN, 0}, {l.err_fd, POLLIN, 0}};
  if (l.out_fd < 0 && l.err_fd < 0) return false;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (ms <= 0) return false;
  if (::poll(fds, 2, static_cast<int>(ms)) <= 0) return false;
  for (int i = 0; i < 2; ++i) {
    int& fd = i == 0 ? l.out_fd : l.err_fd;
    if (fd < 0 || !fds[i].revents) continue;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0)
      (i == 0 ? l.out : l.err).append(buf, static_cast<size_t>(n));
    else {
      ::close(fd);
      fd = -1;
    }
  }
  return true;
}

}  // namespace

std::string lockstep_binary() {
  const char* dir = std::getenv("LOCKSTEP_BIN_DIR");
  return std::string(dir ? dir : ".") + "/lockstep";
}

Launch start_lockstep(const std::vector<std::string>& args) {
  int out[2], err[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
  std::string binary = lockstep_binary();
  std::vector<std::string> all{binary};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  Launch l;
  l.started = Clock::now();
  l.pid = ::fork();
  if (l.pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execv(binary.c_str(), argv.data());
    ::_exit(126);
  }
  ::close(out[1]);
  ::close(err[1]);
  l.out_fd = out[0];
  l.err_fd = err[0];
  return l;
}

bool wait_for_output(Launch& l, const std::string& needle, int count,
                     std::chrono::seconds deadline) {
  auto until = Clock::now() + deadline;
  while (count_of(l.out, needle) < static_cast<size_t>(count))
    if (!pump(l, until)) return false;
  return true;
}

bool wait_for_error_output(Launch& l, const std::string& needle, std::chrono::seconds deadline) {
  auto until = Clock::now() + deadline;
  while (count_of(l.err, needle) < 1)
    if (!pump(l, until)) return false;
  return true;
}

Finished finish(Launch& l, std::chrono::seconds deadline) {
  auto until = l.started + deadline;
  while (pump(l, until)) {
  }
  int status = 0;
  pid_t r = ::waitpid(l.pid, &status, WNOHANG);
  while (r == 0 && Clock::now() < until) {
    // Streams are closed, so exit is imminent; waitpid has no timeout form.
    ::usleep(1000);
    r = ::waitpid(l.pid, &status, WNOHANG);
  }
  if (r == 0) {
    ADD_FAILURE() << "lockstep did not exit within " << deadline.count() << " s; killing it";
    ::kill(l.pid, SIGKILL);
    ::waitpid(l.pid, &status, 0);
  }
  Finished f;
  f.seconds = std::chrono::duration<double>(Clock::now() - l.started).count();
  f.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  f.out = std::move(l.out);
  f.err = std::move(l.err);
  for (int fd : {l.out_fd, l.err_fd})
    if (fd >= 0) ::close(fd);
  return f;
}

Finished run_lockstep(const std::vector<std::string>& args) {
  Launch l = start_lockstep(args);
  return finish(l);
}

}  // namespace lockstep::testing
