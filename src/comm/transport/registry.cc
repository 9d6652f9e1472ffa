// The table of Note [Transport registry], from the generated list of
// transports this build registered.
#include <array>

#include "comm/transport/transport.h"

namespace lockstep::comm {

#define LOCKSTEP_TRANSPORT(name) extern const Transport transport_##name;
#include "comm/transports.inc"
#undef LOCKSTEP_TRANSPORT

namespace {

#define LOCKSTEP_TRANSPORT(name) &transport_##name,
constexpr std::array kTransports = {
#include "comm/transports.inc"
};
#undef LOCKSTEP_TRANSPORT

}  // namespace

std::span<const Transport* const> transports() { return kTransports; }

const Transport* find_transport(std::string_view name) {
  if (name.starts_with("hierarchical-")) name.remove_prefix(std::string_view("hierarchical-").size());
  for (const Transport* t : kTransports)
    if (t->name == name) return t;
  return nullptr;
}

}  // namespace lockstep::comm
