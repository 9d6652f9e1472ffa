// Who this process is within the job, and where to find the others.
#pragma once

#include <string>

namespace lockstep::comm {

struct WorldInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;      // index of this host
  int cross_size = 1;      // number of hosts
  std::string job_id;      // unique per job; names shared-memory segments
  std::string rendezvous;  // host:port of the launcher's store, may be empty
  std::string secret;      // per-job secret (hex), may be empty

  // Reads LOCKSTEP_* (set by `lockstep run`), else torchrun's variables
  // (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...: rank 0 serves the
  // store, docs/launcher.md), else Open MPI / PMI / Slurm variables, else a
  // single-process world. Throws InvalidArgument when the variables
  // contradict each other (rank >= size, ...).
  static WorldInfo from_environment();
  // Throws InvalidArgument naming the first inconsistent field.
  void validate() const;
};

}  // namespace lockstep::comm
