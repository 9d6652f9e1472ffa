// What a transport folder gives the rest of lockstep: one Transport entry.
//
// Note [Transport registry]
// Each folder under src/comm/transport/ that implements a Backend (shm, mpi,
// gloo, ...) defines exactly one `const Transport transport_<name>` in its
// <name>_transport.cc and registers it from its transport.cmake with
// lockstep_register_transport(<name>) when it is built (its library found).
// CMake writes the list of registered names into the generated
// comm/transports.inc, which registry.cc turns into the table below; nothing
// else names a transport. LOCKSTEP_BACKEND's accepted values, auto
// selection, available_backends(), split() and the hierarchical allreduce's
// cross-host stage all come from this table (backend_factory.cc), as Gloo's
// transport/*/device.h and c10d's backend registry do it.
//
// Adding a transport: docs/extending.md. Entries are immutable constants.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/world.h"

namespace lockstep::comm {

struct Transport {
  // LOCKSTEP_BACKEND value and Backend::name() of its flat backends.
  std::string_view name;
  // One line for `lockstep config` and error messages.
  std::string_view summary;

  // Preference under LOCKSTEP_BACKEND=auto for `world` (highest wins), or
  // a negative value when this transport cannot serve it.
  int (*auto_priority)(const WorldInfo& world) = nullptr;

  // The backend over every rank of `world` (collective over them). Throws
  // InvalidArgument naming the problem when `world` is not one it serves.
  std::unique_ptr<Backend> (*make)(const WorldInfo& world, const std::string& tag) = nullptr;

  // Optional: the backend over `ranks` (ascending indices into `parent`,
  // one of this transport's flat backends), called by exactly the members.
  // Null: make() over `sub`, rendezvousing afresh under sub.job_id.
  std::unique_ptr<Backend> (*make_subset)(Backend& parent, std::span<const int> ranks,
                                          const WorldInfo& sub, const std::string& tag) = nullptr;

  // Cross-host transports only (null otherwise): the ranks of `flat` that
  // share `color`, ordered by `key`, as one backend; `group` describes them
  // (rank = key) for transports that rendezvous afresh under `tag`. Called by
  // every rank of `flat`. Makes the transport usable as the cross-host stage
  // of the hierarchical allreduce.
  std::unique_ptr<Backend> (*make_group)(Backend& flat, int color, int key, const WorldInfo& group,
                                         const std::string& tag) = nullptr;

  bool cross_host() const { return make_group != nullptr; }
};

// Every transport built into this library, in registration order.
std::span<const Transport* const> transports();
// The transport called `name` (a hierarchical-<name> backend name resolves to
// <name>), or null.
const Transport* find_transport(std::string_view name);

}  // namespace lockstep::comm
