// The planner's step simulator: replays one synchronous data-parallel step
// of a profiled model on a modelled cluster, event by event, with the
// engine's own policies:
//
//   * gradients are submitted when backward produces them (overlap on) or
//     all at once from synchronize() in parameter order (overlap off);
//     auto follows DistributedOptimizer (on across hosts or with a spare
//     core, off otherwise);
//   * one background thread runs negotiation cycles back to back while
//     work is pending: a cycle is one allreduce of the int32 header
//     (3 + 3 x ranks + cached names) plus the engine's per-cycle overhead;
//     a cycle readies what the slowest rank had submitted when it began;
//   * ready tensors are packed by the engine's fusion rule (same dtype, in
//     order, skipping what does not fit, up to the threshold; a larger
//     tensor runs alone, uncopied); fused batches pay a copy in and out;
//     uncompressed averages pay the 1/size scaling pass;
//   * each allreduce costs what the backend would run at that size (cost.h),
//     hierarchical allreduce included;
//   * compression halves the bytes on the wire and adds the casts on the
//     training thread;
//   * stragglers: synchronous steps wait for the slowest of N ranks, whose
//     compute is late by sigma x E[max of N normals] (sigma: the profile's
//     measured per-step spread, or the scenario's);
//   * where communication is CPU work on the cores that compute (shared
//     memory, no spare core) it cannot overlap: it delays backward instead;
//   * co-located ranks (of one node, or of nodes that are one machine's
//     namespaces) compute slower by a measured factor (memory-bus
//     contention, Scenario::colocated_slowdown);
//   * where communication threads have no core of their own, operations
//     that start during compute, and the first as it ends, wait for one
//     (Scenario::wake_wait_ms).
//
// One step costs O(gradients x cycles); 1024 nodes of a 300-tensor model
// take well under a millisecond. Pure function, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/plan/cost.h"
#include "lockstep/plan/network.h"
#include "lockstep/policy/policies.h"
#include "lockstep/plan/profile.h"

namespace lockstep::plan {

struct Scenario {
  Topology topology;
  int64_t fusion_threshold = 1 << 20;  // LOCKSTEP_FUSION_THRESHOLD
  std::string overlap = "auto";        // auto | on | off (LOCKSTEP_OVERLAP)
  // none | fp16 | bf16 | powersgd:R | onebit | onebit-adam | onebit-lamb
  // (compression.h; the last four modelled past their warm-up)
  std::string compression = "none";
  double jitter_ms = -1;  // per-rank compute sigma; < 0: the profile's
  // For overlap auto and CPU sharing: cores per node (0: unknown, taken as
  // more than the ranks' threads) and intra-op threads per rank.
  int cores_per_node = 0;
  int threads_per_rank = 1;
  // How much slower one rank computes when ranks_per_node ranks share a
  // node than alone (the profile): co-located ranks contend for the memory
  // bus and the last-level cache. Measured (plan validate: compute at np N
  // over compute at np 1 on one host); 1 = no contention. Applies only
  // with more than one rank per node; efficiency stays against the
  // profile's lone rank.
  double colocated_slowdown = 1.0;
  // The nodes are network namespaces (or containers) of one machine, as
  // plan validate's hosts are: their ranks contend for its memory bus like
  // the ranks of one node, so colocated_slowdown applies to them too.
  bool nodes_share_machine = false;
  // Extra wait of every engine operation (negotiation cycle, collective)
  // that starts while the ranks' compute still holds every core, and of
  // the first one that starts as compute ends: a woken communication
  // thread waits for the scheduler to hand it a core (one tick, 4 ms at
  // HZ=250). Only where communication threads have no core of their own
  // (plan validate's network-namespace hosts on one machine); 0 elsewhere.
  double wake_wait_ms = 0;
};

struct StepPrediction {
  int nodes = 1, ranks = 1;
  std::string backend;
  bool overlap = false;
  bool comm_shares_cores = false;
  double step_ms = 0;
  double compute_ms = 0;        // one rank's step without communication (the profile,
                                // times colocated_slowdown with several ranks per node)
  double straggler_ms = 0;      // how much later the slowest rank finishes its compute
  double comm_ms = 0;           // the engine's busy time: cycles, copies, collectives
  double exposed_comm_ms = 0;   // step - compute - straggler: what communication adds
  double overlapped_share = 0;  // of comm_ms, the part hidden behind backward
  double samples_per_s = 0;
  double efficiency = 0;  // throughput / (ranks x single-rank throughput)
  int cycles = 0, collectives = 0;
  // Gradient data one rank hands to collectives per step and sends on the
  // wire (lockstep/comm/traffic.h's measures), negotiation excluded.
  int64_t payload_bytes = 0, wire_bytes = 0;
  double compress_ms = 0;  // PowerSGD/1-bit compute on the training thread (modelled)
  double alpha_ms = 0, beta_ms = 0, gamma_ms = 0, copy_ms = 0, cycle_ms = 0;
  double wake_wait_ms = 0;        // engine operations waiting for a core (Scenario::wake_wait_ms)
  std::string largest_algorithm;  // the algorithm of the largest collective
  std::string bottleneck;         // compute | network bandwidth | latency | reduction |
                                  // memory copies | compression compute | stragglers
};

// Throws InvalidArgument on a bad scenario, and at more than one rank when
// `network` has no host costs; one rank does not communicate, so any
// network (even an empty one) gives the profile's compute.
StepPrediction simulate(const Profile& profile, const NetworkModel& network,
                        const Scenario& scenario);

// DistributedOptimizer's LOCKSTEP_OVERLAP=auto decision for a scenario.
bool overlap_for(const Scenario& scenario);

}  // namespace lockstep::plan
