#include "lockstep/plan/cost.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/policy/hierarchical.h"
#include "lockstep/policy/shm_algorithm.h"

namespace lockstep::plan {

using policy::algorithm_name;
using policy::shm_allreduce_choice;
using policy::ShmChoice;
using policy::ShmPolicy;
namespace {

double ceil_div(double a, double b) { return std::max(1.0, std::ceil(a / b)); }

// Open MPI's fixed rule: recursive doubling below this many bytes.
constexpr double kMpiIntermediateBytes = 10000;

// The knobs the model was fitted with, as the shm transport reads them.
ShmPolicy shm_policy(const NetworkModel& model) {
  ShmPolicy p;
  p.small_bytes = model.shm_small_bytes;
  p.slot_bytes = model.shm_slot_bytes;
  p.nodes = model.shm_nodes;
  return p;
}

}  // namespace

Coefficients shm_one_step(int n, double bytes) { return {1, bytes, (n - 1) * bytes}; }

Coefficients shm_two_step(int n, double bytes, double chunk_bytes) {
  // Pipelined: one step per chunk and one to drain (shm_pipeline.cc).
  return {ceil_div(bytes, chunk_bytes) + 1, (2.0 * n - 1) / n * bytes, double(n - 1) / n * bytes};
}

Coefficients shm_two_level(int n, int nodes, double bytes, double chunk_bytes) {
  // Per chunk: staging and one step per node of the chain (the result's
  // copy and copy out overlap the next chunk), one more to drain; two_step's
  // bytes on L ranks plus the prefix and result read across nodes, and the
  // prefix added once more.
  const double L = double(n) / nodes;
  return {ceil_div(bytes, chunk_bytes) * (nodes + 1) + 1, (2 * L - 1) / L * bytes + 2 * bytes / L,
          (L - 1) / L * bytes + bytes / L};
}

Coefficients shm_reduce_scatter(int n, double bytes, double slot_bytes) {
  // Rounds of slot/n per block (shm_collectives.cc: sub = slot / n).
  return {ceil_div(bytes / n, slot_bytes / n), double(n - 1) / n * bytes,
          double(n - 1) / n * bytes};
}

Coefficients shm_allgather(int n, double bytes, double slot_bytes) {
  // Stage the own block, copy it and every peer's block out.
  return {ceil_div(bytes / n, slot_bytes), double(n + 1) / n * bytes, 0};
}

Coefficients ring(int n, double bytes) {
  if (n <= 1) return {};
  return {2.0 * (n - 1), 2.0 * (n - 1) / n * bytes, double(n - 1) / n * bytes};
}

Coefficients recursive_doubling(int n, double bytes) {
  if (n <= 1) return {};
  double rounds = std::ceil(std::log2(double(n)));
  return {rounds, rounds * bytes, rounds * bytes};
}

Cost apply(const Coefficients& k, const AlphaBeta& ab, double gamma) {
  return {k.steps * ab.alpha_s, k.bytes * ab.beta_s_per_byte, k.reduced * gamma};
}

std::string algorithm_for(const NetworkModel& model, std::string_view transport, int n,
                          double bytes) {
  if (transport == "shm")  // the transport's own decision (Note [One decision])
    return algorithm_name(
        shm_allreduce_choice(shm_policy(model), n, int64_t(std::ceil(bytes)), 1).algorithm);
  if (transport == "mpi") return bytes < kMpiIntermediateBytes ? "recursive_doubling" : "ring";
  if (transport == "gloo" || transport == "nccl") return "ring";
  throw InvalidArgument(fmt::format("unknown transport '{}' (shm gloo mpi nccl)", transport));
}

Coefficients coefficients(const NetworkModel& model, std::string_view transport,
                          std::string_view algorithm, int n, double bytes) {
  if (n <= 1) return {};
  if (algorithm == "one_step") return shm_one_step(n, bytes);
  if (algorithm == "two_step") {
    const ShmChoice c = shm_allreduce_choice(shm_policy(model), n, int64_t(std::ceil(bytes)), 1);
    Coefficients k = shm_two_step(n, bytes, double(c.chunk_bytes));
    if (!c.pipelined) k.steps = 2 * (k.steps - 1);  // two steps per chunk, no drain step
    return k;
  }
  if (algorithm == "two_level") {
    const ShmChoice c = shm_allreduce_choice(shm_policy(model), n, int64_t(std::ceil(bytes)), 1);
    return shm_two_level(n, c.nodes, bytes, double(c.chunk_bytes));
  }
  if (algorithm == "ring") return ring(n, bytes);
  if (algorithm == "recursive_doubling") return recursive_doubling(n, bytes);
  throw InvalidArgument(
      fmt::format("unknown algorithm '{}' for transport {}", algorithm, transport));
}

std::string Topology::backend() const {
  if (ranks() <= 1) return "none";
  if (nodes == 1) return "shm";
  const bool hier =
      policy::hierarchical_taken(policy::parse_hierarchical(hierarchical), nodes, ranks_per_node);
  return hier ? "hierarchical-" + cross : cross;
}

namespace {

double gamma_of(const NetworkModel& m) { return m.host ? m.host->gamma_s_per_byte : 0; }

AllreduceCost flat(const NetworkModel& m, std::string_view transport, int n, double bytes,
                   double beta_scale = 1) {
  std::string algo = algorithm_for(m, transport, n, bytes);
  // A fit on one node cannot measure two_level: two_step's line prices its bytes.
  AlphaBeta ab = m.cost(transport, algo == "two_level" ? "two_step" : algo, bytes);
  ab.beta_s_per_byte *= beta_scale;
  return {apply(coefficients(m, transport, algo, n, bytes), ab, gamma_of(m)),
          fmt::format("{} {}({})", transport, algo, n)};
}

}  // namespace

AllreduceCost allreduce_cost(const NetworkModel& m, const Topology& t, double bytes,
                             int elem_bytes) {
  const std::string backend = t.backend();
  if (backend == "none" || bytes <= 0) return {{}, "none"};
  if (backend == "shm") return flat(m, m.has("shm") ? "shm" : t.cross, t.ranks(), bytes);
  if (backend == t.cross) return flat(m, t.cross, t.ranks(), bytes);
  // Hierarchical (hierarchical_backend.cc): the transport's own rule for
  // when an allreduce goes flat (gradients are never integer averages).
  const int local = t.ranks_per_node;
  const double count = std::ceil(bytes / elem_bytes);
  if (policy::hierarchical_goes_flat(static_cast<size_t>(count), local, false))
    return flat(m, t.cross, t.ranks(), bytes);
  const double block = std::ceil(count / local) * elem_bytes;
  const double padded = block * local;
  Cost c;
  if (local > 1) {
    // The shm fit swept the whole allreduce's size, as `padded` is here.
    const AlphaBeta shm = m.cost("shm", "two_step", padded);
    c += apply(shm_reduce_scatter(local, padded, double(m.shm_slot_bytes)), shm, gamma_of(m));
    c += apply(shm_allgather(local, padded, double(m.shm_slot_bytes)), shm, 0);
  }
  // All local ranks run their cross-host allreduce at once through one NIC;
  // each is an allreduce of `block`, which picks the cross fit's band.
  AllreduceCost across = flat(m, t.cross, t.nodes, block, m.nic_shared ? local : 1);
  c += across.cost;
  return {c, fmt::format("hierarchical: shm({}) + {} + shm({})", local, across.algorithm, local)};
}

}  // namespace lockstep::plan
