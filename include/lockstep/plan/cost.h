// Closed-form allreduce costs and the algorithm each transport picks by size.
//
// Every algorithm is a count of message steps (a), bytes each rank moves (b)
// and bytes of one extra operand each rank reduces (c) — see network.h:
//
//   shm one_step   ((n-1)B <= LOCKSTEP_SHM_SMALL_BYTES): everyone stages its
//                  message, everyone reduces all n     a = 1, b = B, c = (n-1)B
//   shm two_step   chunks of C bytes (shm_chunk_bytes), pipelined: stage,
//                  reduce own share, copy out  a = ceil(B/C)+1, b = (2n-1)/n B, c = (n-1)/n B
//   ring           reduce-scatter + allgather (gloo, mpi large, nccl)
//                                        a = 2(n-1), b = 2(n-1)/n B, c = (n-1)/n B
//   recursive_doubling (mpi, B < 10 kB)  a = b/B = c/B = ceil(log2 n)
//   shm reduce_scatter / allgather: the hierarchical allreduce's stages.
//
// Which shm algorithm runs is the transport's own decision
// (shm_algorithm.h); the ring and recursive doubling mirror Gloo's ring and
// Open MPI's fixed decision rule; tests/plan/cost_test.cc pins them against
// hand-computed values. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "lockstep/plan/network.h"

namespace lockstep::plan {

struct Coefficients {
  double steps = 0;    // a
  double bytes = 0;    // b
  double reduced = 0;  // c
};

// Time split by the term that caused it.
struct Cost {
  double alpha_s = 0, beta_s = 0, gamma_s = 0;
  double total() const { return alpha_s + beta_s + gamma_s; }
  Cost& operator+=(const Cost& o) {
    alpha_s += o.alpha_s;
    beta_s += o.beta_s;
    gamma_s += o.gamma_s;
    return *this;
  }
};

Coefficients shm_one_step(int n, double bytes);
// `chunk_bytes`: the chunk the transport runs at (shm_chunk_bytes).
Coefficients shm_two_step(int n, double bytes, double chunk_bytes);
// Two-level on `nodes` node groups of n / nodes ranks (shm_two_level.cc).
Coefficients shm_two_level(int n, int nodes, double bytes, double chunk_bytes);
// Input of `bytes` (n blocks); each rank keeps its reduced block.
Coefficients shm_reduce_scatter(int n, double bytes, double slot_bytes);
// Output of `bytes` (n blocks); each rank contributes one.
Coefficients shm_allgather(int n, double bytes, double slot_bytes);
Coefficients ring(int n, double bytes);
Coefficients recursive_doubling(int n, double bytes);

Cost apply(const Coefficients& k, const AlphaBeta& ab, double gamma_s_per_byte);

// The algorithm `transport` runs for one allreduce of `bytes` among n ranks
// (shm: policy::shm_allreduce_choice with the model's knobs; gloo: always ring; mpi:
// recursive doubling below 10,000 bytes, else ring; nccl: ring).
std::string algorithm_for(const NetworkModel& model, std::string_view transport, int n,
                          double bytes);
Coefficients coefficients(const NetworkModel& model, std::string_view transport,
                          std::string_view algorithm, int n, double bytes);

// Where the ranks are and which transport joins hosts, as lockstep's backend
// factory would set it up (docs/backends.md).
struct Topology {
  int nodes = 1;
  int ranks_per_node = 1;
  std::string cross = "gloo";         // gloo | mpi | nccl
  std::string hierarchical = "auto";  // auto | 0 | 1 (LOCKSTEP_HIERARCHICAL)
  int ranks() const { return nodes * ranks_per_node; }
  // The backend lockstep would run: "none" (one rank), "shm",
  // "<cross>", or "hierarchical-<cross>".
  std::string backend() const;
};

struct AllreduceCost {
  Cost cost;
  std::string algorithm;  // e.g. "shm two_step", "hierarchical: shm + gloo ring(16) + shm"
};

// One allreduce of `bytes` per rank (elements of `elem_bytes`), as the
// topology's backend would run it. Each stage's costs come from the band of
// the size that stage allreduces per rank: `bytes` for a flat allreduce,
// the padded input for the hierarchical shm stages and one local rank's
// block for its cross-host stage.
AllreduceCost allreduce_cost(const NetworkModel& model, const Topology& topo, double bytes,
                             int elem_bytes);

}  // namespace lockstep::plan
