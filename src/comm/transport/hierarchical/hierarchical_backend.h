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
// flat path. The host layout comes from WorldInfo (local/cross ranks), or,
// when that is inconsistent (mpirun has no host-index variable), from the
// ranks' host names. Requires every host to hold the same number of ranks;
// otherwise make_backend logs why and returns the flat backend.
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
