#include "support/multiproc.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace lockstep::testing {
namespace {

std::atomic<int> g_counter{0};

[[noreturn]] void finish_child(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

void run_child(int rank, int size, const std::string& job,
               const std::function<void(const comm::WorldInfo&)>& body,
               const MultiProcOptions& options) {
  for (const auto& [k, v] : options.env) setenv(k.c_str(), v.c_str(), 1);
  int code = 0;
  try {
    body(local_world(rank, size, job));
    code = ::testing::Test::HasFailure() ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: uncaught exception: %s\n", rank, e.what());
    code = 2;
  }
  finish_child(code);
}

ChildResult decode(int rank, pid_t pid, int status) {
  ChildResult r;
  r.rank = rank;
  r.pid = pid;
  if (WIFEXITED(status)) {
    r.exited = true;
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

}  // namespace

std::string ChildResult::describe() const {
  if (exited) return fmt::format("rank {} exited with {}", rank, exit_code);
  return fmt::format("rank {} killed by signal {} ({})", rank, signal, strsignal(signal));
}

// Pids recycle across test processes (and sanitizer builds run the suite
// again), so a random suffix keeps a stale segment of an earlier crashed job
// from colliding with a new one.
std::string unique_job_id() {
  static const uint32_t salt = std::random_device{}();
  return fmt::format("t{}x{}r{:08x}", getpid(), g_counter.fetch_add(1), salt);
}

comm::WorldInfo local_world(int rank, int size, const std::string& job_id) {
  comm::WorldInfo w;
  w.rank = rank;
  w.size = size;
  w.local_rank = rank;
  w.local_size = size;
  w.job_id = job_id;
  return w;
}

std::vector<ChildResult> run_workers_raw(int size,
                                         const std::function<void(const comm::WorldInfo&)>& body,
                                         const MultiProcOptions& options) {
  std::string job = unique_job_id();
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    pid_t pid = fork();
    if (pid < 0) {
      ADD_FAILURE() << "fork failed: " << std::strerror(errno);
      break;
    }
    if (pid == 0) run_child(rank, size, job, body, options);
    pids.push_back(pid);
  }
  std::vector<ChildResult> results(pids.size());
  std::vector<bool> done(pids.size(), false);
  auto deadline = std::chrono::steady_clock::now() + options.deadline;
  size_t remaining = pids.size();
  while (remaining > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      pid_t got = waitpid(pids[i], &status, WNOHANG);
      if (got == pids[i]) {
        results[i] = decode(static_cast<int>(i), pids[i], status);
        done[i] = true;
        --remaining;
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "workers still running after " << options.deadline.count()
                    << " s: killing them (a hang is a bug)";
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) kill(pids[i], SIGKILL);
      deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return results;
}

std::vector<ChildResult> run_workers(int size, const std::function<void(comm::Communicator&)>& body,
                                     const MultiProcOptions& options) {
  std::string backend = options.backend;
  return run_workers_raw(
      size,
      [&](const comm::WorldInfo& world) {
        auto comm = comm::Communicator::create(world, backend);
        body(*comm);
      },
      options);
}

void expect_all_ok(const std::vector<ChildResult>& results) {
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << r.describe();
}

std::vector<std::string> shm_leftovers(const std::string& job_prefix) {
  std::vector<std::string> out;
  std::string prefix = "lockstep-" + job_prefix;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
    }
    closedir(dir);
  }
  return out;
}

}  // namespace lockstep::testing
