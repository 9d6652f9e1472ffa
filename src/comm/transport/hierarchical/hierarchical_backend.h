// Hierarchical allreduce for worlds that span several hosts.
//
// allreduce of n elements on a world of H hosts x L ranks per host:
//   1. reduce-scatter inside the host over shared memory: local rank i gets
//      slice i (n/L elements, padded) reduced over its host;
//   2. allreduce of slice i across hosts, among the H ranks with local rank i
//      (mpi or gloo), so each cross-host link carries n/L elements per rank
//      instead of n, and all L NICs/cores of a host work at once;
//   3. allgather of the slices inside the host over shared memory.
// Every other collective, tiny allreduces (fewer elements than L) and
// integer averages (which need int64 sums, see mpi_types.h) go through the
// flat cross-host backend. The reduction order is host-major, so results are
// identical on every rank but may differ in the last bits (floats) from the
// flat path.
//
// Note [Hierarchical fallback]
// Whether a world runs hierarchical or flat must be decided identically on
// every rank, or ranks would wait in different collectives. So make_backend
// first builds the flat cross-host backend, then allgathers every rank's
// declared layout (cross rank, local rank, local size, cross size) and a
// hash of its host name (LOCKSTEP_HOST, else gethostname) over it, and
// every rank decides from that same table:
//   - declared layouts consistent: use them;
//   - inconsistent (mpirun has no host-index variable; uneven hosts give
//     ranks different local sizes): derive the layout from the host names;
//   - hosts holding different numbers of ranks: flat everywhere (rank 0
//     logs why unless LOCKSTEP_HIERARCHICAL=auto asked for it);
//   - under auto, one host or one rank per host: flat everywhere (nothing
//     to gain).
// After that, per call: every collective but allreduce, allreduces of
// fewer elements than ranks per host and integer averages run on the flat
// backend, a decision that depends only on arguments all ranks share.
#pragma once

#include <memory>
#include <string>

#include "comm/transport/transport.h"
#include "lockstep/comm/backend.h"
#include "lockstep/comm/world.h"

namespace lockstep::comm::hierarchical {

// With `only_if_useful` (LOCKSTEP_HIERARCHICAL=auto) the flat backend is
// returned, on every rank alike, when the agreed layout has one host or one
// rank per host.
// `cross` is a cross-host transport (Transport::make_group set).
std::unique_ptr<Backend> make_backend(const WorldInfo& world, const std::string& tag,
                                      const Transport& cross, bool only_if_useful = false);

// The flat world backend inside a hierarchical one (split() builds subsets
// from it). Throws InvalidArgument for another kind of backend.
Backend& flat_backend(Backend& hierarchical);

}  // namespace lockstep::comm::hierarchical
