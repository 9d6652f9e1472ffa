// Synchronous parameter-server gradient reduction, for comparison with
// allreduce ("centralised" against "decentralised" reduction). Gradients are
// flattened, cut into K contiguous shards (BytePS-style), pushed to the K
// server ranks that own them, summed and averaged there, and pulled back by
// every worker; then each worker steps its own optimizer, exactly as with
// DistributedOptimizer (the averaged gradients agree within float rounding).
//
// Servers are either colocated (the first K workers also serve) or dedicated:
// `lockstep run -np N --servers K` starts N + K processes and sets
// LOCKSTEP_SERVERS=K; the last K ranks serve and never train:
//
//   lt::init();
//   if (lockstep::parallel::serve_if_dedicated_server()) { lt::shutdown(); return 0; }
//   ... build the model on workers() ranks ...
//   ParameterServer ps(optimizer, *model);
//   ps.zero_grad(); loss.backward(); ps.step();
//   ps.finish();   // releases the dedicated servers (the destructor does too)
//
// Per step, each worker sends M bytes and receives M (M: gradient bytes);
// each server receives W·M/K and sends W·M/K: the servers' links carry
// W/K times a worker's, which is why allreduce (2(N-1)/N·M on every rank,
// no hot spot) wins unless K ≥ W or servers have more bandwidth
// (docs/parallelism.md). A server that dies fails every worker's step with a
// PeerFailure naming it as a parameter server.
//
// Not thread-safe: drive it from the training thread.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/torch/group.h"

namespace lockstep::parallel {

using Group = lockstep::torch::Group;

// Dedicated server ranks from LOCKSTEP_SERVERS (0 when unset).
int dedicated_servers();
// The ranks that train: all but the dedicated servers.
Group workers();
bool is_dedicated_server();
// On a dedicated server rank: serves until the workers finish, then returns
// true (the caller exits). On a worker: returns false at once.
bool serve_if_dedicated_server();

struct ParameterServerOptions {
  // Colocated servers (the first K workers); 0: every worker. Ignored when
  // LOCKSTEP_SERVERS gives dedicated ones.
  int servers = 0;
  std::string name = "ps";
};

class ParameterServer {
 public:
  using NamedParameters = std::vector<std::pair<std::string, ::torch::Tensor>>;

  // Collective over every rank (dedicated servers join from
  // serve_if_dedicated_server). Parameters: one floating dtype.
  ParameterServer(::torch::optim::Optimizer& optimizer, NamedParameters named,
                  ParameterServerOptions options = {});
  ParameterServer(::torch::optim::Optimizer& optimizer, const ::torch::nn::Module& module,
                  ParameterServerOptions options = {});
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;
  ~ParameterServer();  // finish(), errors swallowed

  // Push gradients, pull the averages into param.grad() (zeros for missing).
  void synchronize();
  void step();  // synchronize() then the optimizer's step()
  void zero_grad();
  // Tells dedicated servers that training is over (idempotent).
  void finish();

  int num_servers() const;
  // Global ranks of the servers.
  std::vector<int> server_ranks() const;
  // Elements of the flat gradient owned by server k.
  int64_t shard_elements(int k) const;

  struct Impl;

 private:
  ::torch::optim::Optimizer& optimizer_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::parallel
