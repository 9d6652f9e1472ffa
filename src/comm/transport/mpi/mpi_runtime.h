// Process-wide MPI state: initialisation, finalisation and error translation.
//
// lockstep initialises MPI lazily, the first time an MPI backend is made,
// asking for MPI_THREAD_MULTIPLE (different communicators may be driven from
// different threads; each one by a single thread at a time). If the program
// initialised MPI itself, lockstep leaves initialisation and finalisation to
// it. Otherwise MPI_Finalize runs exactly once, at exit — unless a watchdog
// failure left requests that can never complete (see mark_broken()), in which
// case finalising would hang on the dead peer and MPI_Abort ends the job.
#pragma once

#include <mpi.h>

#include <string>
#include <string_view>

namespace lockstep::comm::mpi {

// Initialises MPI once per process (thread-safe); no-op if already done.
void ensure_initialized();

// True when an MPI launcher (mpirun/mpiexec, PMI, PMIx) started this process,
// i.e. MPI_COMM_WORLD spans the job rather than this process alone.
bool started_by_mpi_launcher();

// Records that a collective was abandoned (dead peer, timeout, mismatch seen
// while waiting): at exit lockstep calls MPI_Abort instead of MPI_Finalize.
void mark_broken(const std::string& reason);

// Throws lockstep::Error naming `what` and MPI's own message when rc is not
// MPI_SUCCESS.
void check(int rc, std::string_view what);

}  // namespace lockstep::comm::mpi
