// Runtime policies written once, for the runtime and the planner alike: the
// engine's tensor-fusion rule (engine/fusion.h adapts its ready list to it)
// and whether overlapping gradient allreduce with backward pays, and what the
// overlap setting resolves to (torch's resolve_overlap and the planner's
// overlap_for both call it). Before issue 28 the planner kept hand-written
// copies of these. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace lockstep::policy {

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

// The overlap setting (DistributedOptimizerOptions::overlap and
// ShardedOptimizer's, LOCKSTEP_OVERLAP, a planner scenario's --overlap) and
// what it resolves to. The torch layer's resolve_overlap and the planner's
// overlap_for both end here, so what the planner predicts is what runs.
enum class OverlapMode { kAuto, kOn, kOff };
// "auto" (or empty), "on" or "off"; InvalidArgument naming `what` (the
// variable or flag) and the accepted values for anything else.
OverlapMode parse_overlap(std::string_view text, std::string_view what);

struct OverlapChoice {
  bool overlap = false;
  bool forced = false;   // on was asked for (not chosen by auto)
  const char* why = "";  // the auto rule that decided; "" when not auto
};
// on and off are taken as they are; auto is off for one rank (nothing to
// reduce), else overlap_pays() for this placement, where worker_cpus <= 0
// means unknown (a planner scenario without its host's cores) and pays.
OverlapChoice choose_overlap(OverlapMode mode, int ranks, bool one_host, int worker_cpus,
                             int intra_op_threads);

// The engine's negotiation header, summed by one int32 allreduce per cycle
// (Note [Negotiation] in src/engine/negotiator.cc): 3 coordinator fields
// (fusion threshold, stall action, autotune), 4 per rank (blob length,
// joined, shutdown, blocked) and one per response-cache slot. The engine
// lays its fields out by these counts; the planner prices that allreduce.
inline constexpr int64_t kNegotiationFixedFields = 3;
inline constexpr int64_t kNegotiationFieldsPerRank = 4;
inline constexpr int64_t negotiation_header_fields(int64_t ranks, int64_t cache_slots) {
  return kNegotiationFixedFields + kNegotiationFieldsPerRank * ranks + cache_slots;
}

// What one rank sends in a bandwidth-optimal allreduce of `bytes` over
// `ranks` ranks, 2B(n-1)/n (ring reduce-scatter + allgather; nccl-tests'
// busBw convention, Note [Wire bytes] in src/comm/traffic.cc). The traffic
// counters, the compressed steps' closed forms and the planner count it so.
inline constexpr int64_t allreduce_wire_bytes(int64_t bytes, int ranks) {
  return ranks <= 1 ? 0 : 2 * bytes * (ranks - 1) / ranks;
}

}  // namespace lockstep::policy
