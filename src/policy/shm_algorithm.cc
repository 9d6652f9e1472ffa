#include "lockstep/policy/shm_algorithm.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"

namespace lockstep::policy {

// Note [One decision]
// The shm transport asks shm_allreduce_choice which algorithm to run, and the
// planner's algorithm_for asks the same function (with the model's knobs in
// place of the environment), so the planner cannot drift from the runtime
// (tests/plan/shm_algorithm_test.cc; before issue 28 cost.cc restated the
// transport's threshold by comment). The rules, derived in docs/shm.md:
//  * one_step reads (n-1)B from peers in one step; two_step reads about 2B
//    in two. Each step costs a few cache-line round trips, each peer byte a
//    cross-core transfer, so one_step pays while the bytes it reads from
//    peers stay below small_bytes: at n = 2 that is the old rule (B <=
//    small_bytes), at n = 16 it keeps 16 KiB off the one-step path, where it
//    was slower than 64 KiB on two_step (issue 28).
//  * two_step runs in chunks small enough that what every rank stages for a
//    chunk is still in cache when its peers read it (n * chunk ~ 4 MiB), and
//    at most half a slot (three chunk buffers rotate through two slots,
//    Note [Pipelined two-step] in shm_pipeline.cc).
//  * A linear wait polls n-1 lines; a dissemination barrier ceil(log2 n)
//    lines one after the other: fewer from 5 ranks on. But with more ranks
//    than cores each of those rounds may wait for its partner to be
//    scheduled, where a linear step needs every rank scheduled once: 8
//    ranks on 2 busy cores took 190 us per 4 KiB allreduce against 78-100
//    us linear, so auto stays linear there (as LOCKSTEP_SPIN_US stops
//    spinning).
//  * On ranks grouped by NUMA node (shm_node_groups > 1), messages on the
//    two_step side run two_level, which reads about 2B/L across the node
//    boundary instead of about 2B(n-L)/n (docs/shm.md; its speed on a real
//    multi-socket host is not measured yet). one_step stays one_step.

namespace {

// LOCKSTEP_SHM_NODES: auto (0) | off (1) | a number of groups.
int parse_nodes(const std::string& text) {
  if (text == "auto") return 0;
  if (text == "off") return 1;
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1)
    throw InvalidArgument(fmt::format(
        "LOCKSTEP_SHM_NODES={} must be auto, off or a number of node groups (1, 2, ...)", text));
  return value;
}

}  // namespace

ShmPolicy ShmPolicy::from_knobs() {
  ShmPolicy p;
  p.small_bytes = static_cast<int64_t>(
      parse_bytes(knob_string("LOCKSTEP_SHM_SMALL_BYTES"), "LOCKSTEP_SHM_SMALL_BYTES"));
  p.slot_bytes = static_cast<int64_t>(
      parse_bytes(knob_string("LOCKSTEP_SHM_SLOT_BYTES"), "LOCKSTEP_SHM_SLOT_BYTES"));
  const std::string chunk = knob_string("LOCKSTEP_SHM_CHUNK_BYTES");
  p.chunk_bytes =
      chunk == "auto" ? 0 : static_cast<int64_t>(parse_bytes(chunk, "LOCKSTEP_SHM_CHUNK_BYTES"));
  if (chunk != "auto" && (p.chunk_bytes < 4096 || p.chunk_bytes % 4096 != 0))
    throw InvalidArgument(fmt::format(
        "LOCKSTEP_SHM_CHUNK_BYTES={} must be auto or a multiple of 4096 of at least 4096", chunk));
  p.algorithm = knob_choice("LOCKSTEP_SHM_ALGORITHM");
  p.sync = knob_choice("LOCKSTEP_SHM_SYNC");
  p.nodes = parse_nodes(knob_string("LOCKSTEP_SHM_NODES"));
  p.host_cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  return p;
}

const char* algorithm_name(ShmAlgorithm a) {
  switch (a) {
    case ShmAlgorithm::kOneStep: return "one_step";
    case ShmAlgorithm::kTwoStep: return "two_step";
    case ShmAlgorithm::kTwoLevel: return "two_level";
  }
  return "?";
}

const char* sync_name(ShmSync s) { return s == ShmSync::kLinear ? "linear" : "dissemination"; }

std::string ShmChoice::name() const {
  std::string out = algorithm_name(algorithm);
  if (algorithm == ShmAlgorithm::kTwoLevel) out += fmt::format("/{}x{}", nodes, node_ranks);
  if (algorithm != ShmAlgorithm::kOneStep) {
    const bool mib = chunk_bytes % (1 << 20) == 0;
    out += fmt::format("/{}{}", mib ? chunk_bytes >> 20 : chunk_bytes >> 10, mib ? "MiB" : "KiB");
    if (!pipelined) out += "+2steps";
  }
  if (sync == ShmSync::kDissemination) out += "+dissemination";
  return out;
}

ShmSync shm_sync_for(const ShmPolicy& policy, int ranks) {
  if (policy.sync == "linear" || policy.algorithm == "legacy") return ShmSync::kLinear;
  if (policy.sync == "dissemination") return ShmSync::kDissemination;
  const bool own_cores = policy.host_cores <= 0 || ranks <= policy.host_cores;
  return ranks >= 5 && own_cores ? ShmSync::kDissemination : ShmSync::kLinear;
}

int64_t shm_chunk_bytes(const ShmPolicy& policy, int ranks) {
  if (policy.algorithm == "legacy") return policy.slot_bytes;
  // The pipeline rotates three chunk buffers through a rank's two slots.
  const int64_t most = policy.slot_bytes / 2 / 4096 * 4096;
  if (policy.chunk_bytes > 0) return std::min(policy.chunk_bytes, most);
  constexpr int64_t kInFlight = 4 << 20, kFloor = 64 << 10;
  const int64_t per_rank = kInFlight / std::max(1, ranks) / 4096 * 4096;
  return std::min(most, std::max(kFloor, per_rank));
}

int shm_node_groups(const ShmPolicy& policy, int ranks) {
  const int g = policy.nodes;
  return g > 1 && ranks % g == 0 && ranks / g >= 2 ? g : 1;
}

ShmChoice shm_allreduce_choice(const ShmPolicy& policy, int ranks, int64_t bytes, int elem_bytes) {
  ShmChoice c;
  c.sync = shm_sync_for(policy, ranks);
  c.pipelined = policy.algorithm != "legacy";
  // Whole elements per chunk, so a chunk never splits one.
  const int64_t es = std::max(1, elem_bytes);
  c.chunk_bytes = std::max(es, shm_chunk_bytes(policy, ranks) / es * es);
  // The one-step path stages the whole message in one slot.
  const bool fits = bytes <= policy.slot_bytes;
  bool one;
  if (policy.algorithm == "one_step")
    one = fits;
  else if (policy.algorithm == "two_step" || policy.algorithm == "two_level")
    one = false;
  else if (policy.algorithm == "legacy")
    one = bytes <= std::min(policy.small_bytes, policy.slot_bytes);
  else
    one = fits && int64_t(std::max(1, ranks - 1)) * bytes <= policy.small_bytes;
  c.algorithm = one ? ShmAlgorithm::kOneStep : ShmAlgorithm::kTwoStep;
  const int groups = shm_node_groups(policy, ranks);
  // Forced flat algorithms stay flat (one_step: two_step past a slot).
  const bool flat_only = policy.algorithm == "legacy" || policy.algorithm == "two_step" ||
                         policy.algorithm == "one_step";
  if (!one && groups > 1 && !flat_only) {
    c.algorithm = ShmAlgorithm::kTwoLevel;
    c.nodes = groups;
    c.node_ranks = ranks / groups;
  }
  return c;
}

SegmentBytes shm_allreduce_bytes(ShmAlgorithm algorithm, int ranks, double bytes, bool receives,
                                 int nodes, int node) {
  if (ranks <= 1) return {};
  const double n = ranks, share = bytes / n;
  const double remote = nodes > 1 ? n - n / nodes : 0;  // peers on other nodes
  if (algorithm == ShmAlgorithm::kOneStep)              // stage B; read every peer's B
    return {receives ? (n - 1) * bytes : 0, bytes, receives ? remote * bytes : 0};
  if (algorithm == ShmAlgorithm::kTwoLevel) {
    // Within the node as two_step on L ranks (share B/L); plus the prefix
    // from the previous node (all but node 0) and the final result from the
    // last node (all but the last), read once each and the latter written
    // again for the node's peers.
    const double local = n / nodes, s = bytes / local;
    const double cross = (node > 0 ? s : 0) + (node < nodes - 1 ? s : 0);
    const double again = node < nodes - 1 ? s : 0;
    return {2 * (local - 1) * s + cross, bytes + again, cross};
  }
  // Stage all but the own share, write the reduced share; read the own share
  // of every peer, then (receivers) every other share's result.
  return {(n - 1) * share + (receives ? bytes - share : 0), bytes,
          remote * share * (receives ? 2 : 1)};
}

SegmentBytes shm_broadcast_bytes(int ranks, bool root, double bytes) {
  if (ranks <= 1) return {};
  return root ? SegmentBytes{0, bytes} : SegmentBytes{bytes, 0};
}

}  // namespace lockstep::policy
