// Chooses and constructs the transport for a world (LOCKSTEP_BACKEND).
//
// Selection (docs/backends.md):
//   shm           every rank on this host (shared memory).
//   mpi           ranks started by mpirun/mpiexec; any number of hosts.
//   gloo          TCP through the rendezvous store of `lockstep run`.
//   auto          one host: shm, except under a bare MPI launcher (mpirun
//                 without `lockstep run`), where it is mpi; several hosts:
//                 mpi under an MPI launcher, else gloo.
// For mpi and gloo, a world spanning several hosts uses the hierarchical
// allreduce (shm inside each host + the cross-host transport between hosts)
// when LOCKSTEP_HIERARCHICAL is 1, or auto with several ranks per host.
// Such a backend is named "hierarchical-mpi" / "hierarchical-gloo"; these
// names are accepted back by make_backend (split() passes the name on).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/world.h"

namespace lockstep::comm {

// `requested` is auto|shm|mpi|gloo (or a name returned by Backend::name()).
// `tag` distinguishes communicators of one job (the world, subsets made by
// split()). Throws InvalidArgument for an unknown or unavailable backend,
// naming the alternatives.
std::unique_ptr<Backend> make_backend(std::string_view requested, const WorldInfo& world,
                                      const std::string& tag);

// What `requested` resolves to for this world: shm, mpi or gloo (before the
// hierarchical decision).
std::string resolve_backend(std::string_view requested, const WorldInfo& world);

// True when LOCKSTEP_HIERARCHICAL asks for the hierarchical allreduce in `world`.
bool use_hierarchical(const WorldInfo& world);

// The backend for a subset of `parent`'s ranks (ascending indices into
// parent), as Communicator::split needs: MPI can only build a sub-communicator
// from its parent, while shm and gloo rendezvous afresh under `sub.job_id`.
// Called by exactly the members.
std::unique_ptr<Backend> make_subset_backend(Backend& parent, std::span<const int> ranks,
                                             const WorldInfo& sub, const std::string& tag);

// Backends compiled into this build, e.g. "auto, shm, mpi, gloo".
std::string available_backends();

}  // namespace lockstep::comm
