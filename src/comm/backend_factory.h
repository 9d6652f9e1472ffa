// Chooses and constructs the transport for a world (LOCKSTEP_BACKEND), from
// the registry of the transports built in (Note [Transport registry] in
// comm/transport/transport.h; docs/backends.md):
//   <name>        that transport (shm, mpi, gloo, ...).
//   auto          the transport whose auto_priority() is highest for the
//                 world: one host: shm, except under a bare MPI launcher
//                 (mpirun without `lockstep run`), where it is mpi; several
//                 hosts: mpi under an MPI launcher, else gloo.
// For cross-host transports (those with make_group), a world spanning
// several hosts uses the hierarchical allreduce (shm inside each host + the
// cross-host transport between hosts) when LOCKSTEP_HIERARCHICAL is 1, or
// auto with several ranks per host. Such a backend is named
// "hierarchical-<name>"; these names are accepted back by make_backend
// (split() passes the name on).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/world.h"
#include "lockstep/policy/hierarchical.h"

namespace lockstep::comm {

// `requested` is auto or a transport's name (or a name returned by
// Backend::name()).
// `tag` distinguishes communicators of one job (the world, subsets made by
// split()). Throws InvalidArgument for an unknown or unavailable backend,
// naming the alternatives.
std::unique_ptr<Backend> make_backend(std::string_view requested, const WorldInfo& world,
                                      const std::string& tag);

// The transport `requested` resolves to for this world (before the
// hierarchical decision).
std::string resolve_backend(std::string_view requested, const WorldInfo& world);

// True when LOCKSTEP_HIERARCHICAL's `mode` (parsed once by make_backend)
// asks for the hierarchical allreduce in `world`.
bool use_hierarchical(policy::HierarchicalMode mode, const WorldInfo& world);

// The backend for a subset of `parent`'s ranks (ascending indices into
// parent), as Communicator::split needs: the transport's make_subset (MPI can
// only build a sub-communicator from its parent), else a fresh rendezvous
// under `sub.job_id` (shm, gloo).
// Called by exactly the members.
std::unique_ptr<Backend> make_subset_backend(Backend& parent, std::span<const int> ranks,
                                             const WorldInfo& sub, const std::string& tag);

// LOCKSTEP_BACKEND values this build accepts, e.g. "auto, shm, mpi, gloo".
std::string available_backends();

}  // namespace lockstep::comm
