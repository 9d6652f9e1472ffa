// Tensor fusion: which ready items run as one collective.
//
// Allreduces with the same (dtype, op, prescale, postscale) are packed, in the
// agreed order, into one buffer of at most `threshold` bytes. An item larger
// than threshold / kFusedTensorDivisor runs alone, uncopied: fusing it saves
// one collective's fixed cost (a few µs on shared memory) but copies it twice
// (in and out of the fusion buffer), which costs more from ~128 KiB up
// (docs/performance.md, "Engine overhead"). The plan depends only on
// replicated data, so every rank packs identically. Process sets never mix:
// each set has its own negotiator and plans its own ready list.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/ready_item.h"

namespace lockstep::engine::detail {

struct Batch {
  std::vector<size_t> items;  // indices into the ready list, in order
  size_t bytes = 0;           // of the fused allreduce; 0 otherwise
  bool fused() const { return items.size() > 1; }
};

inline constexpr size_t kFusedTensorDivisor = 8;
// The largest tensor that is packed with others at this threshold.
inline constexpr size_t largest_fused_tensor(size_t threshold) {
  return threshold / kFusedTensorDivisor;
}

std::vector<Batch> plan_batches(const std::vector<ReadyItem>& ready, size_t threshold);

}  // namespace lockstep::engine::detail
