// The table of Note [Transport registry], from the generated list of
// transports this build registered.
#include <array>

#include "comm/transport/transport.h"
#include "lockstep/comm/transports.h"

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

std::vector<std::string_view> transport_names() {
  std::vector<std::string_view> names;
  for (const Transport* t : kTransports) names.push_back(t->name);
  return names;
}

const Transport* find_transport(std::string_view name) {
  if (name.starts_with("hierarchical-"))
    name.remove_prefix(std::string_view("hierarchical-").size());
  for (const Transport* t : kTransports)
    if (t->name == name) return t;
  return nullptr;
}

}  // namespace lockstep::comm
