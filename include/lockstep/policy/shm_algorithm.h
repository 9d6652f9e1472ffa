// Which algorithm the shared-memory transport runs, and what it moves.
//
// The one decision the runtime (src/comm/transport/shm) and the planner
// (cost.cc) both call, so a prediction names the algorithm that really runs
// (Note [One decision] in shm_algorithm.cc; docs/shm.md derives the rules).
//
//   allreduce / reduce of B bytes on n ranks:
//     one_step   every rank stages B, every rank reduces all n        1 step
//                chosen while (n-1)*B <= small_bytes (what each rank
//                reads from its peers), so the cut-off falls with n
//     two_step   reduce-scatter + all-gather through the segment, in
//                chunks of chunk_bytes, pipelined: every rank reduces its
//                1/n share of each chunk in parallel      chunks + 1 (legacy: 2 per chunk)
//     two_level  two_step's shape per NUMA node of L ranks (G nodes), the
//                shares' rank-order sums chained node to node (Note
//                [Two-level allreduce] in shm_two_level.cc): chosen instead
//                of two_step when the ranks form G > 1 contiguous groups of
//                L >= 2 (LOCKSTEP_SHM_NODES)      (G + 1) per chunk + 1
//   every step waits for all ranks either by polling each peer's line
//   (linear, n-1 lines) or by a dissemination barrier over the same lines
//   (ceil(log2 n) rounds of one line each; not with more ranks than cores,
//   where each round may wait for a peer to be scheduled).
//
// Every algorithm reduces in rank order, so the choice never changes a
// result's bits (docs/engine.md, "Deterministic mode").
// Pure functions of their arguments except ShmPolicy::from_knobs; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace lockstep::policy {

enum class ShmAlgorithm : uint8_t { kOneStep = 1, kTwoStep = 2, kTwoLevel = 3 };
enum class ShmSync : uint8_t { kLinear = 1, kDissemination = 2 };

// The LOCKSTEP_SHM_* knobs that pick algorithms, as numbers.
struct ShmPolicy {
  int64_t small_bytes = 16 << 10;  // LOCKSTEP_SHM_SMALL_BYTES
  int64_t slot_bytes = 1 << 20;    // LOCKSTEP_SHM_SLOT_BYTES
  int64_t chunk_bytes = 0;         // LOCKSTEP_SHM_CHUNK_BYTES; 0: auto (shm_chunk_bytes)
  // LOCKSTEP_SHM_ALGORITHM: auto | legacy (the rule before issue 28: fixed
  // cut-off, slot-sized chunks, linear waits) | one_step | two_step | two_level.
  std::string algorithm = "auto";
  // Contiguous, equal groups of ranks, one per NUMA node (LOCKSTEP_SHM_NODES):
  // 0 = auto, which the transport resolves at attach from where its ranks
  // are bound (until then, and for from_knobs' other callers, no grouping);
  // 1 = no grouping; k = k groups of ranks/k.
  int nodes = 0;
  std::string sync = "auto";  // LOCKSTEP_SHM_SYNC: auto | linear | dissemination
  // CPUs of the host (from_knobs: the online ones); 0: unknown, taken as
  // one per rank. More ranks than CPUs keeps steps linear (shm_sync_for).
  int host_cores = 0;

  // Reads the knobs; throws InvalidArgument naming a knob that does not parse.
  static ShmPolicy from_knobs();
};

struct ShmChoice {
  ShmAlgorithm algorithm = ShmAlgorithm::kOneStep;
  int64_t chunk_bytes = 0;  // two_step, two_level: message bytes per chunk (whole elements)
  int nodes = 1;            // two_level: node groups
  int node_ranks = 0;       // two_level: ranks per node group
  // two_step: one step per chunk (Note [Pipelined two-step]); false: two
  // steps per chunk, the legacy implementation.
  bool pipelined = true;
  ShmSync sync = ShmSync::kLinear;
  // "one_step", "two_step/256KiB" (chunk; "+2steps" unpipelined),
  // "two_level/2x4/256KiB" (2 nodes of 4 ranks), with
  // "+dissemination" when the steps wait that way: what `lockstep config`,
  // the benchmark and the timeline print.
  std::string name() const;
};

const char* algorithm_name(ShmAlgorithm algorithm);
const char* sync_name(ShmSync sync);

// How every step of a collective on `ranks` ranks waits: auto is
// dissemination from 5 ranks while every rank has a core of its own.
ShmSync shm_sync_for(const ShmPolicy& policy, int ranks);
// The two_step chunk on `ranks` ranks: the knob, or auto: about 4 MiB of
// staging in flight across all ranks (max(64 KiB, 4 MiB / n)), which the
// caches of a host with n cores hold; at most half a slot (legacy: a slot).
int64_t shm_chunk_bytes(const ShmPolicy& policy, int ranks);
// The node groups two_level runs with on `ranks` ranks: policy.nodes when
// it splits them into groups of at least 2 ranks, else 1 (flat).
int shm_node_groups(const ShmPolicy& policy, int ranks);
// The allreduce (and reduce) of `bytes` per rank in elements of `elem_bytes`.
// A reduce runs two_step where this says two_level (docs/shm.md).
ShmChoice shm_allreduce_choice(const ShmPolicy& policy, int ranks, int64_t bytes, int elem_bytes);

// Bytes one rank reads from and writes to the shared segment (peers'
// staging included, its own private buffers excluded), for a message that
// splits evenly into n shares per chunk (two_level: L per node) and whose
// elements accumulate in their own type (f32, f64; two_level keeps wider
// prefixes for the others); the runtime's counters (comm::segment_traffic)
// measure the same quantities. `cross_node_read`: the part of `read` staged
// by ranks of another node group.
struct SegmentBytes {
  double read = 0;
  double written = 0;
  double cross_node_read = 0;
};
// For a rank of node group `node` (0-based) of `nodes` contiguous equal
// groups (1: no grouping, nothing crosses). `receives`: false for the
// non-root ranks of a reduce (not two_level, which only allreduces).
SegmentBytes shm_allreduce_bytes(ShmAlgorithm algorithm, int ranks, double bytes,
                                 bool receives = true, int nodes = 1, int node = 0);
SegmentBytes shm_broadcast_bytes(int ranks, bool root, double bytes);

}  // namespace lockstep::policy
