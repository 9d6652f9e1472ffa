// Job identity and cleanup: the job id, each worker's environment, and the
// removal of the job's POSIX shared memory. Internal.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "launcher/spec.h"

namespace lockstep::launcher {

// 12 random lowercase hex characters (getrandom).
std::string new_job_id();

struct JobIdentity {
  std::string job_id;
  std::string rendezvous;  // host:port
  std::string secret_hex;
};

// A worker's environment: the launcher's own (only its LOCKSTEP_* variables
// for a remote worker, whose host supplies the rest), then spec.env, then the
// worker's identity (which always wins).
std::vector<std::pair<std::string, std::string>> worker_environment(const LaunchSpec& spec,
                                                                    const JobIdentity& job,
                                                                    int rank,
                                                                    const Placement& where);
std::vector<std::string> as_env_strings(
    const std::vector<std::pair<std::string, std::string>>& env);

// Unlinks every /dev/shm entry whose name starts with "lockstep-<job_id>";
// returns how many were removed.
int remove_job_shared_memory(std::string_view job_id);

// The program's path: as given when it contains '/', else searched in PATH.
// Empty when not found or not executable.
std::string resolve_program(const std::string& name);

}  // namespace lockstep::launcher
