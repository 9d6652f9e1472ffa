// Runtime policies written once, for the runtime and the planner alike: the
// engine's tensor-fusion rule (engine/fusion.h adapts its ready list to it)
// and whether overlapping gradient allreduce with backward pays (torch's
// placement and the planner's overlap_for both call it). Before issue 28 the
// planner kept hand-written copies of both. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lockstep::plan {

// Tensor fusion: items of the same key are packed, in ready order, into
// batches of at most `threshold` bytes. An item larger than threshold /
// kFusedTensorDivisor runs alone, uncopied: fusing it saves one collective's
// fixed cost (a few µs on shared memory) but copies it twice (in and out of
// the fusion buffer), which costs more from ~128 KiB up (docs/performance.md,
// "Engine overhead"). Items that are not fusible always run alone.
inline constexpr int64_t kFusedTensorDivisor = 8;
inline constexpr int64_t largest_fused_tensor(int64_t threshold) {
  return threshold / kFusedTensorDivisor;
}

struct FusionItem {
  int64_t bytes = 0;
  int key = 0;  // items fuse only with the same key (engine: dtype, op, scales)
  bool fusible = true;
};
// Which indices of `ready` run together, in order of their first item.
std::vector<std::vector<size_t>> fusion_batches(const std::vector<FusionItem>& ready,
                                                int64_t threshold);
// Whether a batch of `members` items is fused: packed into the fusion
// buffer (one copy in, one copy out). A lone item runs in place, uncopied.
// The engine's Batch::fused() and the planner's copy costs both ask this.
inline constexpr bool is_fused(size_t members) { return members > 1; }

// The CPUs one of `workers` unbound workers of a host with `host_cpus` CPUs
// computes on: an equal share, at least 1 (the placement's share too).
inline int worker_cpus(int host_cpus, int workers) {
  const int share = host_cpus / (workers > 1 ? workers : 1);
  return share > 1 ? share : 1;
}

// Whether overlapping gradient allreduce with backward can pay. Across
// hosts, yes (the network works while the cores compute); on one host the
// shared-memory transfer is CPU work, so only when a core is left over.
inline bool overlap_pays(bool one_host, int worker_cpus, int intra_op_threads) {
  return !one_host || worker_cpus > intra_op_threads;
}

}  // namespace lockstep::plan
