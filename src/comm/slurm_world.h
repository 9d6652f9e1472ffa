// The world of a worker started by plain `srun` (no `lockstep run`).
// Internal to comm; the contract is in docs/slurm.md.
//
// Identity: rank SLURM_PROCID of SLURM_NTASKS, local rank SLURM_LOCALID of
// this node's count in SLURM_STEP_TASKS_PER_NODE, host SLURM_NODEID of
// SLURM_STEP_NUM_NODES. The job id "slurm<job>-<step>" keeps two steps of
// one allocation apart (it names their shared memory).
//
// Rendezvous, needed only when the step spans hosts or LOCKSTEP_BACKEND is
// gloo: task 0 serves the authenticated store (a fresh random secret) and
// publishes "address + secret" in a file only its owner can read,
// <dir>/.lockstep-rendezvous-<job>.<step>, where <dir> is
// LOCKSTEP_RENDEZVOUS_DIR, else SLURM_SUBMIT_DIR (shared by the job's nodes
// on clusters), else the working directory. The other tasks wait for it
// (up to LOCKSTEP_TIMEOUT), refuse it unless it is theirs and mode 0600,
// and connect. Task 0 keeps the store up and removes the file at exit.
#pragma once

#include <optional>

#include "lockstep/comm/world.h"

namespace lockstep::comm {

// nullopt outside a Slurm job step (SLURM_STEP_ID or SLURM_PROCID unset).
std::optional<WorldInfo> slurm_world();

}  // namespace lockstep::comm
