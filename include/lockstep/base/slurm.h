// Reading a Slurm job's description from the variables Slurm sets
// (docs/slurm.md): used by `lockstep run` inside an allocation (hosts and
// slots) and by workers started with plain `srun` (local rank and size).
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::slurm {

// "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5 (the format of
// SLURM_JOB_NODELIST; several bracket groups expand as a product, zero
// padding is kept). Throws InvalidArgument naming the text when malformed.
std::vector<std::string> expand_hostlist(std::string_view text);

// "2(x3),1" -> 2 2 2 1 (SLURM_TASKS_PER_NODE, SLURM_STEP_TASKS_PER_NODE,
// SLURM_JOB_CPUS_PER_NODE). Throws InvalidArgument naming the text.
std::vector<int> expand_counts(std::string_view text);

struct Allocation {
  std::string job_id;
  std::vector<std::string> hosts;  // in SLURM_JOB_NODELIST order
  std::vector<int> slots;          // tasks (else CPUs) per host
};

// The allocation this process runs in (SLURM_JOB_ID and SLURM_JOB_NODELIST
// set), or nullopt. Throws InvalidArgument when the variables disagree.
std::optional<Allocation> current_allocation();

}  // namespace lockstep::slurm
