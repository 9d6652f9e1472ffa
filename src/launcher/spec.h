// What `lockstep run` was asked to do, after flag parsing. Internal.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "launcher/elastic.h"
#include "launcher/hosts.h"

namespace lockstep::launcher {

struct LaunchSpec {
  int num_proc = 0;
  bool prefix_output = false;
  bool verbose = false;
  std::vector<std::string> program;  // argv of every worker; program[0] as typed
  // Extra environment for every worker, in order (later entries win).
  std::vector<std::pair<std::string, std::string>> env;
  // -H / --hostfile; empty: every rank on this host.
  std::vector<HostSlots> hosts;
  std::string remote_exec = "ssh -o BatchMode=yes";
  // How long remote workers may take to reach the rendezvous store.
  std::chrono::seconds start_timeout{120};
  // Address the store binds and workers connect to; empty: chosen (hosts.cc).
  std::string rendezvous_addr;
  // --min-np/--max-np/--host-discovery-script: keep going when workers fail.
  ElasticOptions elastic;
  // Inside a Slurm allocation (--slurm): hosts come from the allocation and
  // every rank, this host's too, starts through srun (remote_exec).
  bool through_slurm = false;
};

// Starts and supervises the job; returns the launcher's exit status.
int supervise(const LaunchSpec& spec);

}  // namespace lockstep::launcher
