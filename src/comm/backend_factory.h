// Chooses and constructs the transport for a world (LOCKSTEP_BACKEND).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/world.h"

namespace lockstep::comm {

// `requested` is auto|shm|mpi|gloo. `tag` distinguishes communicators of one
// job (the world, subsets made by split()). Throws InvalidArgument for an
// unknown or unavailable backend, naming the alternatives.
std::unique_ptr<Backend> make_backend(std::string_view requested, const WorldInfo& world,
                                      const std::string& tag);

// What `auto` resolves to for this world.
std::string resolve_backend(std::string_view requested, const WorldInfo& world);

}  // namespace lockstep::comm
