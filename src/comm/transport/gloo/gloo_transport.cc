// The gloo entry of Note [Transport registry].
#include "comm/transport/gloo/gloo_backend.h"
#include "comm/transport/transport.h"

namespace lockstep::comm {
namespace {

// TCP serves any world, so it is the fallback across hosts.
int gloo_priority(const WorldInfo&) { return 1; }

std::unique_ptr<Backend> gloo_make_group(Backend&, int, int, const WorldInfo& group,
                                         const std::string& tag) {
  return gloo_transport::make_backend(group, tag);
}

}  // namespace

extern const Transport transport_gloo;
const Transport transport_gloo{
    .name = "gloo",
    .summary = "TCP through libgloo, started by `lockstep run`, any number of hosts",
    .auto_priority = gloo_priority,
    .make = gloo_transport::make_backend,
    .make_group = gloo_make_group,
};

}  // namespace lockstep::comm
