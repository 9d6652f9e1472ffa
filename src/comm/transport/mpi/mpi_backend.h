// MPI transport: lockstep collectives over an MPI library (Open MPI 4.1 here).
//
// Works in programs started by mpirun/mpiexec (or srun with PMI): every rank
// of MPI_COMM_WORLD is a rank of the world, in the same order. A job started
// by `lockstep run` has no MPI launcher, so make_backend refuses a world of
// more than one rank there, naming mpirun and the alternatives. See
// docs/backends.md for the failure semantics (mpi_watchdog.h).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/world.h"

namespace lockstep::comm::mpi {

// A backend over a duplicate of MPI_COMM_WORLD; `world` must describe the
// same ranks. Initialises MPI if needed. Collective over all ranks.
std::unique_ptr<Backend> make_backend(const WorldInfo& world, const std::string& tag);

// A backend over the ranks `ranks` (indices into `parent`, ascending) of an
// MPI backend. Collective over those ranks only (MPI_Comm_create_group);
// `tag` must be the same on every member and unique among concurrent splits.
std::unique_ptr<Backend> make_subset_backend(Backend& parent, std::span<const int> ranks,
                                             const std::string& tag);

// Ranks grouped by `color`, ordered by `key` (MPI_Comm_split over the parent);
// collective over every rank of `parent`. Used by the hierarchical backend.
std::unique_ptr<Backend> make_split_backend(Backend& parent, int color, int key);

}  // namespace lockstep::comm::mpi
