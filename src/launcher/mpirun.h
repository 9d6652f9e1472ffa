// `lockstep run --backend mpi` delegates to mpirun. Internal.
#pragma once

#include <string>
#include <vector>

#include "launcher/spec.h"
#include "lockstep/base/error.h"

namespace lockstep::launcher {

// The mpirun argv for `spec` (-np, --host from -H/--hostfile, the remote
// agent, -x for every LOCKSTEP_* and -x variable, which it exports into this
// process's environment). Throws InvalidArgument for flags mpirun cannot take.
std::vector<std::string> mpirun_command(const LaunchSpec& spec, bool as_root);

// Replaces this process with mpirun; returns only on failure (127).
int exec_mpirun(const LaunchSpec& spec);

}  // namespace lockstep::launcher
