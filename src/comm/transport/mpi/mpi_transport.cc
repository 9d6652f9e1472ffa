// The mpi entry of Note [Transport registry].
#include "comm/transport/mpi/mpi_backend.h"
#include "comm/transport/mpi/mpi_runtime.h"
#include "comm/transport/transport.h"
#include "lockstep/base/knobs.h"

namespace lockstep::comm {
namespace {

// Only an MPI launcher can form an MPI world. Started by mpirun without
// `lockstep run` (no LOCKSTEP_RANK), the MPI world is the job, so mpi wins
// even on one host; under `lockstep run` it loses to shm on one host and
// beats gloo across hosts.
int mpi_priority(const WorldInfo& world) {
  if (!mpi::started_by_mpi_launcher()) return -1;
  bool bare = !knob_is_set("LOCKSTEP_RANK");
  return bare && world.size > 1 ? 20 : 5;
}

std::unique_ptr<Backend> make_subset(Backend& parent, std::span<const int> ranks,
                                     const WorldInfo& sub, const std::string&) {
  return mpi::make_subset_backend(parent, ranks, sub.job_id);
}

std::unique_ptr<Backend> mpi_make_group(Backend& flat, int color, int key, const WorldInfo&,
                                        const std::string&) {
  return mpi::make_split_backend(flat, color, key);
}

}  // namespace

extern const Transport transport_mpi;
const Transport transport_mpi{
    .name = "mpi",
    .summary = "MPI, processes started by mpirun/mpiexec, any number of hosts",
    .auto_priority = mpi_priority,
    .make = mpi::make_backend,
    .make_subset = make_subset,
    .make_group = mpi_make_group,
};

}  // namespace lockstep::comm
