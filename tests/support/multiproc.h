// Runs a test body in N real worker processes (fork), each with its own
// Communicator over the transport under test, as Gloo's multiproc_test does.
//
// Children report gtest failures through their exit status; the parent
// returns every child's status so tests can also assert on crashes and kills.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"

namespace lockstep::testing {

struct ChildResult {
  int rank = -1;
  pid_t pid = -1;
  bool exited = false;  // normal exit
  int exit_code = -1;   // when exited
  int signal = 0;       // when killed
  bool ok() const { return exited && exit_code == 0; }
  std::string describe() const;
};

struct MultiProcOptions {
  std::string backend = "shm";
  std::map<std::string, std::string> env;  // set in every child before the body
  std::chrono::seconds deadline{120};      // parent SIGKILLs children after this
};

// A WorldInfo for rank `rank` of `size` on one host, with a job id unique to
// this test process and call.
comm::WorldInfo local_world(int rank, int size, const std::string& job_id);
std::string unique_job_id();

// Forks `size` children; each creates a Communicator (unless the body wants
// the raw world: see run_workers_raw) and runs body(comm). A child exits 0
// when the body returns without gtest failures, 1 on failures, 2 on an
// escaped exception (printed).
std::vector<ChildResult> run_workers(int size, const std::function<void(comm::Communicator&)>& body,
                                     const MultiProcOptions& options = {});
std::vector<ChildResult> run_workers_raw(int size,
                                         const std::function<void(const comm::WorldInfo&)>& body,
                                         const MultiProcOptions& options = {});

// Asserts (gtest) that every child exited 0.
void expect_all_ok(const std::vector<ChildResult>& results);

// Names of /dev/shm entries that belong to lockstep jobs whose id starts with
// `job_prefix`.
std::vector<std::string> shm_leftovers(const std::string& job_prefix);

}  // namespace lockstep::testing
