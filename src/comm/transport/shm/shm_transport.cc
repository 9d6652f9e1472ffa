// The shm entry of Note [Transport registry].
#include <fmt/format.h>

#include "comm/transport/shm/shm_backend.h"
#include "comm/transport/transport.h"
#include "lockstep/base/error.h"

namespace lockstep::comm {
namespace {

// Every rank on this host: the fastest transport there is.
int shm_priority(const WorldInfo& world) { return world.local_size == world.size ? 10 : -1; }

std::unique_ptr<Backend> make(const WorldInfo& world, const std::string& tag) {
  if (world.local_size != world.size)
    throw InvalidArgument(fmt::format(
        "LOCKSTEP_BACKEND=shm needs every rank on one host, but this job has {} ranks on "
        "this host out of {}: use auto, mpi or gloo",
        world.local_size, world.size));
  return shm::make_backend(world, tag);
}

}  // namespace

extern const Transport transport_shm;
const Transport transport_shm{
    .name = "shm",
    .summary = "shared memory, every rank on one host",
    .auto_priority = shm_priority,
    .make = make,
};

}  // namespace lockstep::comm
