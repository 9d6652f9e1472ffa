// What `lockstep run` was asked to do, after flag parsing. Internal.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lockstep::launcher {

struct LaunchSpec {
  int num_proc = 0;
  bool prefix_output = false;
  bool verbose = false;
  std::vector<std::string> program;  // argv of every worker; program[0] as typed
  // Extra environment for every worker, in order (later entries win).
  std::vector<std::pair<std::string, std::string>> env;
};

// Starts and supervises the job; returns the launcher's exit status.
int supervise(const LaunchSpec& spec);

}  // namespace lockstep::launcher
