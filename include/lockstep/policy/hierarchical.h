// When the hierarchical allreduce runs (a shared-memory stage on each host
// around one cross-host allreduce per local rank, Note [Hierarchical
// fallback] in src/comm/transport/hierarchical/hierarchical_backend.h),
// written once for the transport and the planner (plan::Topology::backend,
// plan::allreduce_cost). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

namespace lockstep::policy {

enum class HierarchicalMode { kAuto, kOn, kOff };

// LOCKSTEP_HIERARCHICAL's text: "auto", "1"/"on"/"true", "0"/"off"/"false".
// Throws InvalidArgument naming the text and the accepted forms.
HierarchicalMode parse_hierarchical(std::string_view text);

// Whether a job of `hosts` hosts with `local_ranks` ranks each (a layout
// every rank agrees on) takes the hierarchical path: under auto when both
// stages have peers (otherwise one stage would be a copy), when asked for
// (on) as soon as either has; never when off.
bool hierarchical_taken(HierarchicalMode mode, int hosts, int local_ranks);

// Whether one allreduce on the hierarchical path goes the flat way instead:
// fewer elements than local ranks (no block for every local rank), or an
// integer average (dividing at two stages would round twice).
inline bool hierarchical_goes_flat(size_t count, int local_ranks, bool integer_average) {
  return integer_average || count < static_cast<size_t>(local_ranks);
}

}  // namespace lockstep::policy
