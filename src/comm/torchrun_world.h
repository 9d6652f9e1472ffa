// The world of a worker started with torchrun's variables but without
// `lockstep run` (torchrun itself, Kubeflow's PyTorchJob, SageMaker, Slurm
// wrappers). Internal to comm; the contract is in docs/launcher.md,
// "torchrun's environment".
//
// Identity: rank RANK of WORLD_SIZE; local rank LOCAL_RANK of
// LOCAL_WORLD_SIZE (absent: every worker is a host of its own, as one pod a
// worker); host GROUP_RANK (or NODE_RANK, else RANK / LOCAL_WORLD_SIZE) of
// GROUP_WORLD_SIZE (else WORLD_SIZE / LOCAL_WORLD_SIZE).
//
// Rendezvous (WORLD_SIZE > 1): rank 0 serves lockstep's authenticated store
// at MASTER_ADDR:MASTER_PORT (MASTER_PORT + 1 when torchrun's agent holds
// MASTER_PORT itself, TORCHELASTIC_USE_AGENT_STORE=True). The secret is
// LOCKSTEP_SECRET when every worker was given the same one; else rank 0
// makes one and hands it over in a 0600 file (rendezvous_file.h) in
// LOCKSTEP_RENDEZVOUS_DIR, else the working directory. Nothing is ever
// served unauthenticated. Every rank then checks in, and all wait until
// WORLD_SIZE ranks have: past LOCKSTEP_TIMEOUT each fails with a
// TimeoutError naming how many arrived and which ranks are missing. Rank 0
// names the job (its shared memory) with a fresh random id.
#pragma once

#include <optional>

#include "lockstep/comm/world.h"

namespace lockstep::comm {

// nullopt unless RANK and WORLD_SIZE are both set. Throws InvalidArgument
// when WORLD_SIZE > 1 and MASTER_ADDR or MASTER_PORT is missing, and
// TimeoutError/Error when the rendezvous fails.
std::optional<WorldInfo> torchrun_world();

}  // namespace lockstep::comm
