// Tensor fusion: which ready items run as one collective.
//
// Allreduces with the same (dtype, op, prescale, postscale) are packed, in the
// agreed order, into one buffer of at most `threshold` bytes; an item larger
// than threshold / kFusedTensorDivisor runs alone, uncopied. The rule is
// policy::fusion_batches (lockstep/policy/policies.h, which says why), shared
// with the planner. The plan depends only on replicated data, so every rank
// packs identically. Process sets never mix: each set has its own negotiator
// and plans its own ready list.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/ready_item.h"
#include "lockstep/policy/policies.h"

namespace lockstep::engine::detail {

struct Batch {
  std::vector<size_t> items;  // indices into the ready list, in order
  size_t bytes = 0;           // of the fused allreduce; 0 otherwise
  bool fused() const { return policy::is_fused(items.size()); }
};

// The largest tensor that is packed with others at this threshold.
inline constexpr size_t largest_fused_tensor(size_t threshold) {
  return static_cast<size_t>(policy::largest_fused_tensor(static_cast<int64_t>(threshold)));
}

std::vector<Batch> plan_batches(const std::vector<ReadyItem>& ready, size_t threshold);

}  // namespace lockstep::engine::detail
