// The network model: alpha-beta-gamma costs per transport and per allreduce
// algorithm, either fitted on this machine by `lockstep bench fit` or taken
// from a named preset for hardware nobody has here. Schema
// "lockstep.network/1", described in docs/plan.md.
//
//   time(algorithm, n ranks, B bytes) = a(n,B) alpha + b(n,B) beta + c(n,B) gamma
//
// alpha: seconds per message step, beta: seconds per byte moved by one rank,
// gamma: seconds per byte of one extra operand reduced (the host's kernel
// speed). a, b and c are the algorithm's step and byte counts (cost.h).
//
// A fitted algorithm may have size bands: one alpha-beta line per range of
// B, the per-rank allreduce size its sweep measured, where one line over
// the whole sweep misses its own points (docs/plan.md, section 2). Files
// without bands (presets, older fits) are one line for every size.
//
// Plain values; no thread-safety concerns.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::plan {

inline constexpr std::string_view kNetworkSchema = "lockstep.network/1";

struct AlphaBeta {
  double alpha_s = 0;          // per message step
  double beta_s_per_byte = 0;  // per byte one rank sends or copies
};

struct FitQuality {
  int points = 0;
  double rms_rel_error = 0;  // root mean square of (fitted - measured) / measured
  double max_rel_error = 0;
};

// One alpha-beta line, fitted on the sweep's sizes min_bytes..max_bytes.
struct SizeBand {
  int64_t min_bytes = 0, max_bytes = 0;  // the band's smallest and largest measured B
  AlphaBeta cost;
  FitQuality fit;
};

struct AlgorithmModel {
  AlphaBeta cost;  // one line over every size (what a model without bands uses)
  FitQuality fit;  // of that line; points == 0 for presets
  // Ascending, disjoint; empty: `cost` at every size. A message of B bytes
  // per rank takes the band whose measured range holds B; below the first
  // or above the last, the first or the last line; between two bands'
  // measured sizes, the two lines blended by log(B), so that the cost is
  // continuous in B.
  std::vector<SizeBand> bands;

  AlphaBeta at(double bytes) const;
};

// Costs of the work the engine does on the host around each collective.
struct HostModel {
  double gamma_s_per_byte = 0;  // reduction kernel: one extra f32 operand, per byte
  double copy_s_per_byte = 0;   // memcpy: fusion buffer in and out, scaling passes
  double cycle_overhead_s = 0;  // engine per negotiation cycle beyond its header allreduce
};

// One measured collective and what the fit makes of it.
struct MeasuredPoint {
  std::string transport, algorithm;
  int np = 0;
  int64_t bytes = 0;
  double measured_s = 0;
  double fitted_s = 0;
};

struct NetworkModel {
  std::string name;
  std::string description;
  bool preset = false;  // true: published figures, not measured here
  std::optional<HostModel> host;
  // "shm" (inside a host), "gloo", "mpi" (across hosts; in one host for a
  // fit), "nccl" (presets of GPU clusters). Algorithm names per transport:
  // shm: one_step, two_step; gloo: ring; mpi: recursive_doubling, ring;
  // nccl: ring.
  std::map<std::string, std::map<std::string, AlgorithmModel>> transports;
  int64_t shm_small_bytes = 16 << 10;  // LOCKSTEP_SHM_SMALL_BYTES at fit time
  int64_t shm_slot_bytes = 1 << 20;    // LOCKSTEP_SHM_SLOT_BYTES at fit time
  // Node groups of the shm ranks (ShmPolicy::nodes; 1: none): > 1 plans
  // two_level, costed with two_step's fitted line (docs/shm.md).
  int shm_nodes = 1;
  // Ranks of a host share its NIC (hierarchical cross-host stage runs one
  // allreduce per local rank at once). False for presets with a NIC per GPU.
  bool nic_shared = true;
  std::vector<MeasuredPoint> points;

  bool has(std::string_view transport) const;
  // The costs for one allreduce of `bytes` per rank (the size picks the
  // band, AlgorithmModel::bands). Throws InvalidArgument naming the network
  // when the transport or the algorithm is not in the model.
  AlphaBeta cost(std::string_view transport, std::string_view algorithm, double bytes) const;
  const AlgorithmModel& algorithm(std::string_view transport, std::string_view algorithm) const;
};

// `overlay`'s host and transports replace `base`'s; names are joined.
NetworkModel merge(NetworkModel base, const NetworkModel& overlay);

NetworkModel parse_network(std::string_view json_text, std::string_view source);
std::string network_to_json(const NetworkModel& model);
NetworkModel load_network(const std::string& path);
void save_network(const std::string& path, const NetworkModel& model);

// Named presets (docs/plan.md lists them with their sources).
const std::vector<NetworkModel>& presets();
const NetworkModel* find_preset(std::string_view name);

// Each spec is a preset name or a network file; they are merged in order.
// A model with no host section gets default_host() (and says so in its
// description): the planner needs copy and reduction speeds.
NetworkModel resolve_network(const std::vector<std::string>& specs);
HostModel default_host();

}  // namespace lockstep::plan
