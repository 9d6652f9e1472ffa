#include "comm/backend_factory.h"

#include <fmt/format.h>

#include "comm/transport/hierarchical/hierarchical_backend.h"
#include "comm/transport/transport.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/policy/hierarchical.h"

namespace lockstep::comm {
namespace {

const Transport& find_or_throw(std::string_view name) {
  if (const Transport* t = find_transport(name)) return *t;
  throw InvalidArgument(fmt::format(
      "LOCKSTEP_BACKEND='{}' is not a transport of this build (available: {}); mpi, gloo "
      "and nccl are built when their libraries are found (-DLOCKSTEP_WITH_MPI=ON / "
      "-DLOCKSTEP_WITH_GLOO=ON / -DLOCKSTEP_WITH_CUDA=ON)",
      name, available_backends()));
}

const Transport& choose_auto(const WorldInfo& world) {
  const Transport* best = nullptr;
  int best_priority = -1;
  for (const Transport* t : transports()) {
    int p = t->auto_priority(world);
    if (p > best_priority) best = t, best_priority = p;
  }
  if (best) return *best;
  throw InvalidArgument(fmt::format(
      "the job spans {} hosts but no usable cross-host backend is built in (available: {}): "
      "start it with mpirun in a build with MPI, or use a build with Gloo",
      world.cross_size, available_backends()));
}

}  // namespace

std::string available_backends() {
  std::string s = "auto";
  for (const Transport* t : transports()) s += fmt::format(", {}", t->name);
  return s;
}

std::string resolve_backend(std::string_view requested, const WorldInfo& world) {
  if (requested == "auto") return std::string(choose_auto(world).name);
  return std::string(find_or_throw(requested).name);
}

bool use_hierarchical(policy::HierarchicalMode mode, const WorldInfo& world) {
  // Ranks may disagree on their layout (uneven hosts: under mpirun each
  // derives the host count from its own host's size), so auto always takes
  // the hierarchical path, which allgathers the layout and asks
  // policy::hierarchical_taken there, falling back to flat everywhere at
  // once when it does not pay (see make_backend).
  if (mode == policy::HierarchicalMode::kAuto) return world.size > 1;
  return policy::hierarchical_taken(mode, world.cross_size, world.local_size);
}

std::unique_ptr<Backend> make_backend(std::string_view requested, const WorldInfo& world,
                                      const std::string& tag) {
  const Transport& t = requested == "auto" ? choose_auto(world) : find_or_throw(requested);
  if (!t.cross_host() || world.size <= 1) return t.make(world, tag);
  const policy::HierarchicalMode mode =
      policy::parse_hierarchical(knob_string("LOCKSTEP_HIERARCHICAL"));
  if (use_hierarchical(mode, world))
    return hierarchical::make_backend(world, tag, t, mode == policy::HierarchicalMode::kAuto);
  return t.make(world, tag);
}

std::unique_ptr<Backend> make_subset_backend(Backend& parent, std::span<const int> ranks,
                                             const WorldInfo& sub, const std::string& tag) {
  const Transport& t = find_or_throw(parent.name());
  if (!t.make_subset) return make_backend(parent.name(), sub, tag);
  Backend& flat = parent.name() == t.name ? parent : hierarchical::flat_backend(parent);
  return t.make_subset(flat, ranks, sub, tag);
}

}  // namespace lockstep::comm
