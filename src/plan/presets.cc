// Named networks nobody has here, from published figures (docs/plan.md cites
// each). They carry only the cross-host transport: pair them with a
// `lockstep bench fit --backend shm` file for the host's own costs.
#include <algorithm>

#include "lockstep/plan/network.h"

namespace lockstep::plan {
namespace {

// Seconds per byte at `gbit` line rate with `efficiency` of it as goodput.
double per_byte(double gbit, double efficiency) { return 8.0 / (gbit * 1e9 * efficiency); }

NetworkModel tcp(std::string name, std::string description, double alpha_us, double gbit,
                 double efficiency) {
  NetworkModel m;
  m.name = std::move(name);
  m.description = std::move(description);
  m.preset = true;
  m.transports["gloo"]["ring"].cost = {alpha_us * 1e-6, per_byte(gbit, efficiency)};
  return m;
}

NetworkModel rdma(std::string name, std::string description, double alpha_us, double gbit,
                  double efficiency) {
  NetworkModel m;
  m.name = std::move(name);
  m.description = std::move(description);
  m.preset = true;
  AlphaBeta ab{alpha_us * 1e-6, per_byte(gbit, efficiency)};
  m.transports["mpi"]["recursive_doubling"].cost = ab;
  m.transports["mpi"]["ring"].cost = ab;
  return m;
}

// Horovod's 2017 benchmark cluster: 4 P100 per server, NCCL 2 rings over
// 25 Gbit/s RoCE, Horovod's 5 ms cycle. GPU-side reduction and copies run
// at P100 HBM2 speed (732 GB/s).
NetworkModel horovod_p100() {
  NetworkModel m;
  m.name = "horovod-p100-roce25";
  m.description =
      "preset: Horovod's published benchmark cluster, 128 servers x 4 P100, NCCL 2 ring over "
      "25 Gbit/s RoCE (alpha: NCCL's network ring step latency, 9.6 us; 90% of line rate), "
      "GPU reductions at HBM2 speed, Horovod's 5 ms cycle";
  m.preset = true;
  m.nic_shared = true;
  m.host = HostModel{
      .gamma_s_per_byte = 3.0 / 732e9, .copy_s_per_byte = 2.0 / 732e9, .cycle_overhead_s = 5e-3};
  m.transports["nccl"]["ring"].cost = {9.6e-6, per_byte(25, 0.9)};
  return m;
}

std::vector<NetworkModel> make_presets() {
  return {
      tcp("eth-10g",
          "preset: 10 Gbit/s Ethernet, TCP (Gloo ring); 30 us per message step, "
          "94% of line rate",
          30, 10, 0.94),
      tcp("eth-25g",
          "preset: 25 Gbit/s Ethernet, TCP (Gloo ring); 25 us per message step, "
          "92% of line rate",
          25, 25, 0.92),
      tcp("eth-100g",
          "preset: 100 Gbit/s Ethernet, TCP (Gloo ring); 20 us per message step; one "
          "TCP stream per peer reaches ~40 Gbit/s",
          20, 100, 0.4),
      tcp("eth-200g",
          "preset: 200 Gbit/s Ethernet, TCP (Gloo ring); 20 us per message step; one "
          "TCP stream per peer reaches ~50 Gbit/s",
          20, 200, 0.25),
      rdma("ib-edr",
           "preset: 100 Gbit/s InfiniBand EDR, MPI over RDMA; 1.5 us per message step, "
           "96% of line rate",
           1.5, 100, 0.96),
      rdma("ib-hdr",
           "preset: 200 Gbit/s InfiniBand HDR, MPI over RDMA; 1.3 us per message step, "
           "96% of line rate",
           1.3, 200, 0.96),
      horovod_p100(),
  };
}

}  // namespace

const std::vector<NetworkModel>& presets() {
  static const std::vector<NetworkModel> all = make_presets();
  return all;
}

const NetworkModel* find_preset(std::string_view name) {
  const auto& all = presets();
  auto it =
      std::find_if(all.begin(), all.end(), [&](const NetworkModel& m) { return m.name == name; });
  return it == all.end() ? nullptr : &*it;
}

}  // namespace lockstep::plan
