#include "comm/backend_factory.h"

#include <fmt/format.h>

#include "comm/transport/shm/shm_backend.h"
#include "lockstep/base/error.h"

namespace lockstep::comm {

std::string resolve_backend(std::string_view requested, const WorldInfo& world) {
  if (requested != "auto") return std::string(requested);
  if (world.local_size == world.size) return "shm";
  throw InvalidArgument(fmt::format(
      "the job spans {} hosts but no cross-host backend is built in: set LOCKSTEP_BACKEND "
      "to mpi or gloo in a build that has them", world.cross_size));
}

std::unique_ptr<Backend> make_backend(std::string_view requested, const WorldInfo& world,
                                      const std::string& tag) {
  std::string kind = resolve_backend(requested, world);
  if (kind == "shm") {
    if (world.local_size != world.size)
      throw InvalidArgument(fmt::format(
          "LOCKSTEP_BACKEND=shm needs every rank on one host, but this job has {} ranks on "
          "this host out of {}: use auto, mpi or gloo", world.local_size, world.size));
    return shm::make_backend(world, tag);
  }
  throw InvalidArgument(fmt::format(
      "LOCKSTEP_BACKEND='{}' is not available in this build (available: auto, shm)", kind));
}

}  // namespace lockstep::comm
