#include "comm/backend_factory.h"

#include <cstdlib>

#include <fmt/format.h>

#include "comm/transport/shm/shm_backend.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#ifdef LOCKSTEP_HAVE_MPI
#include "comm/transport/mpi/mpi_backend.h"
#endif
#ifdef LOCKSTEP_HAVE_GLOO
#include "comm/transport/gloo/gloo_backend.h"
#endif
#if defined(LOCKSTEP_HAVE_MPI) || defined(LOCKSTEP_HAVE_GLOO)
#include "comm/transport/hierarchical/hierarchical_backend.h"
#endif

namespace lockstep::comm {
namespace {

constexpr bool kHaveMpi =
#ifdef LOCKSTEP_HAVE_MPI
    true;
#else
    false;
#endif
constexpr bool kHaveGloo =
#ifdef LOCKSTEP_HAVE_GLOO
    true;
#else
    false;
#endif

// mpirun/mpiexec/PMI started this process and `lockstep run` did not.
bool bare_mpi_launcher() {
  if (std::getenv("LOCKSTEP_RANK")) return false;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

bool any_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

[[noreturn]] void unavailable(std::string_view kind) {
  throw InvalidArgument(fmt::format(
      "LOCKSTEP_BACKEND='{}' is not available in this build (available: {}); rebuild with "
      "-DLOCKSTEP_WITH_MPI=ON / -DLOCKSTEP_WITH_GLOO=ON", kind, available_backends()));
}

// The flat (one-level) backend of a cross-host kind.
std::unique_ptr<Backend> make_flat(const std::string& kind, const WorldInfo& world,
                                   const std::string& tag) {
#ifdef LOCKSTEP_HAVE_MPI
  if (kind == "mpi") return mpi::make_backend(world, tag);
#endif
#ifdef LOCKSTEP_HAVE_GLOO
  if (kind == "gloo") return gloo_transport::make_backend(world, tag);
#endif
  unavailable(kind);
}

#if defined(LOCKSTEP_HAVE_MPI) || defined(LOCKSTEP_HAVE_GLOO)
hierarchical::CrossTransport cross_transport(const std::string& kind) {
  hierarchical::CrossTransport t;
  t.kind = kind;
  t.make_world = [kind](const WorldInfo& w, const std::string& tag) {
    return make_flat(kind, w, tag);
  };
#ifdef LOCKSTEP_HAVE_MPI
  if (kind == "mpi")
    t.make_group = [](Backend& flat, int color, int key, const WorldInfo&, const std::string&) {
      return mpi::make_split_backend(flat, color, key);
    };
#endif
#ifdef LOCKSTEP_HAVE_GLOO
  if (kind == "gloo")
    t.make_group = [](Backend&, int, int, const WorldInfo& group, const std::string& tag) {
      return gloo_transport::make_backend(group, tag);
    };
#endif
  return t;
}
#endif

}  // namespace

std::string available_backends() {
  std::string s = "auto, shm";
  if (kHaveMpi) s += ", mpi";
  if (kHaveGloo) s += ", gloo";
  return s;
}

std::string resolve_backend(std::string_view requested, const WorldInfo& world) {
  if (requested.starts_with("hierarchical-")) requested.remove_prefix(13);
  if (requested != "auto") return std::string(requested);
  bool one_host = world.local_size == world.size;
  if (one_host && !(kHaveMpi && world.size > 1 && bare_mpi_launcher())) return "shm";
  if (kHaveMpi && any_mpi_launcher()) return "mpi";
  if (kHaveGloo) return "gloo";
  throw InvalidArgument(fmt::format(
      "the job spans {} hosts but no usable cross-host backend is built in (available: {}): "
      "start it with mpirun in a build with MPI, or use a build with Gloo",
      world.cross_size, available_backends()));
}

bool use_hierarchical(const WorldInfo& world) {
  std::string mode = knob_string("LOCKSTEP_HIERARCHICAL");
  // Ranks may disagree on their layout (uneven hosts: under mpirun each
  // derives the host count from its own host's size), so auto always takes
  // the hierarchical path, which allgathers the layout and falls back to flat
  // everywhere at once when it does not pay (see make_backend).
  if (mode == "auto") return world.size > 1;
  if (mode == "1" || mode == "on" || mode == "true") return world.cross_size > 1 || world.local_size > 1;
  if (mode == "0" || mode == "off" || mode == "false") return false;
  throw InvalidArgument(fmt::format("LOCKSTEP_HIERARCHICAL='{}': use auto, 0 or 1", mode));
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
  if (kind != "mpi" && kind != "gloo")
    throw InvalidArgument(fmt::format("LOCKSTEP_BACKEND='{}' is unknown (available: {})", kind,
                                      available_backends()));
  if ((kind == "mpi" && !kHaveMpi) || (kind == "gloo" && !kHaveGloo)) unavailable(kind);
#if defined(LOCKSTEP_HAVE_MPI) || defined(LOCKSTEP_HAVE_GLOO)
  if (world.size > 1 && use_hierarchical(world))
    return hierarchical::make_backend(world, tag, cross_transport(kind),
                                      knob_string("LOCKSTEP_HIERARCHICAL") == "auto");
#endif
  return make_flat(kind, world, tag);
}

std::unique_ptr<Backend> make_subset_backend(Backend& parent, std::span<const int> ranks,
                                             const WorldInfo& sub, const std::string& tag) {
#ifdef LOCKSTEP_HAVE_MPI
  if (parent.name() == "mpi") return mpi::make_subset_backend(parent, ranks, sub.job_id);
  if (parent.name() == "hierarchical-mpi")
    return mpi::make_subset_backend(hierarchical::flat_backend(parent), ranks, sub.job_id);
#endif
  return make_backend(parent.name(), sub, tag);
}

}  // namespace lockstep::comm
