// What each engine collective is, in one table: every place that once asked
// "does this collective carry data? reduce? may its first dimension differ
// per rank? fuse?" with its own boolean expression asks this table instead,
// so a new collective is one row here plus its executor step.
//
// Immutable constants; thread-safe.
#pragma once

#include <string_view>

#include "lockstep/engine/types.h"

namespace lockstep::engine::detail {

struct CollectiveTraits {
  Collective collective;
  std::string_view name;  // one spelling across layers: "reduce_scatter"
  bool carries_data;      // has an input buffer (not barrier/join/add_process_set)
  bool reduces;           // takes a ReduceOp that every rank must agree on
  bool scales;            // takes prescale/postscale (floating dtypes only)
  bool has_root;          // takes a root rank of the process set
  bool first_dim_varies;  // ranks may submit different first dimensions
  bool allocates_output;  // output shape known only after negotiation: needs an Allocator
  bool fusible;           // small ones batch into one collective (fusion.h)
  bool cacheable;         // repeats negotiate with one bit (response_cache.h)
  bool runs_with_joined;  // may run while some ranks have joined (join())
};

const CollectiveTraits& traits(Collective c);

}  // namespace lockstep::engine::detail
