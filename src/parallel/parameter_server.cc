// Note [Parameter-server protocol]
// Setup (once): world rank 0 broadcasts {elements M, dtype, servers K} to
// every rank ("<name>.setup"); dedicated servers learn the sizes from it.
// Shard k (contiguous, M/K elements, the first M%K one more) belongs to the
// k-th server in rank order. Each step is two alltoalls over the world:
//   push: every worker sends [1, shard_k] to server k (a leading control
//         word, then the gradient slice); server k receives W rows of
//         1 + |shard_k|, checks the control words and averages the slices;
//   pull: server k sends its averaged shard to every worker; a worker
//         receives the shards in server order, i.e. the whole flat gradient.
// Finish: workers push a lone control word 0; a server that receives it from
// every worker stops. Alltoall carries exactly the centralised pattern (no
// rank sends to a non-owner), so the traffic counters see PS traffic.
#include "lockstep/parallel/parameter_server.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/collectives.h"
#include "parallel/shard_layout.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;

// Outside the anonymous namespace because ParameterServer::Impl holds one:
// GCC warns about a member of an internal type in a class with external
// linkage (-Wsubobject-linkage) when this file is part of a unity batch.
struct ServerLayout {
  int64_t elements = 0;
  ::torch::ScalarType dtype = ::torch::kFloat32;
  std::vector<int> servers;  // global ranks, ascending
  std::vector<int> workers;
  std::vector<int64_t> offset, length;  // per server
};

namespace {

std::optional<Group>& workers_group() {
  static std::optional<Group> group;
  return group;
}

int dedicated_from_knob() {
  const int64_t k = knob_int("LOCKSTEP_SERVERS");
  if (k < 0 || k >= lt::size())
    throw InvalidArgument(
        fmt::format("LOCKSTEP_SERVERS={} must leave at least one worker among "
                    "the job's {} ranks",
                    k, lt::size()));
  return static_cast<int>(k);
}

using Layout = ServerLayout;

Layout make_layout(int64_t elements, ::torch::ScalarType dtype, int colocated) {
  Layout l;
  l.elements = elements;
  l.dtype = dtype;
  const int world = lt::size(), dedicated = dedicated_servers();
  const int w = world - dedicated;
  for (int r = 0; r < w; ++r) l.workers.push_back(r);
  const int k = dedicated > 0 ? dedicated : (colocated > 0 ? colocated : w);
  if (k > w && dedicated == 0)
    throw InvalidArgument(
        fmt::format("ParameterServer: {} colocated servers but only {} workers", k, w));
  for (int i = 0; i < k; ++i) l.servers.push_back(dedicated > 0 ? w + i : i);
  for (int i = 0; i < k; ++i) {
    l.length.push_back(elements / k + (i < elements % k ? 1 : 0));
    l.offset.push_back(i == 0 ? 0 : l.offset[i - 1] + l.length[i - 1]);
  }
  return l;
}

// Rank 0's sizes on every rank.
Layout agree_layout(int64_t elements, ::torch::ScalarType dtype, int colocated,
                    const std::string& name) {
  auto meta = ::torch::tensor(
      {elements, static_cast<int64_t>(dtype), static_cast<int64_t>(colocated)}, ::torch::kInt64);
  lt::broadcast_(meta, 0, name + ".setup");
  auto* m = meta.data_ptr<int64_t>();
  if (lt::rank() != 0 && dedicated_servers() == 0 &&
      (m[0] != elements || m[1] != static_cast<int64_t>(dtype)))
    throw MismatchError(
        fmt::format("ParameterServer: rank 0 has {} gradient elements of {}, rank {} "
                    "{} of {}",
                    m[0], c10::toString(static_cast<::torch::ScalarType>(m[1])), lt::rank(),
                    elements, c10::toString(dtype)));
  return make_layout(m[0], static_cast<::torch::ScalarType>(m[1]), static_cast<int>(m[2]));
}

int index_of(const std::vector<int>& ranks, int rank) {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

}  // namespace

int dedicated_servers() { return lt::size() > 1 ? dedicated_from_knob() : 0; }

bool is_dedicated_server() { return lt::rank() >= lt::size() - dedicated_servers(); }

Group workers() {
  if (dedicated_servers() == 0) return Group();
  if (!workers_group())
    throw InvalidArgument(
        "workers(): call lockstep::parallel::serve_if_dedicated_server() on every "
        "rank first (it creates the workers' group)");
  return *workers_group();
}

struct ParameterServer::Impl {
  Layout layout;
  NamedParameters named;
  std::string name;
  bool finished = false;

  int my_server() const { return index_of(layout.servers, lt::rank()); }
  bool is_worker() const { return index_of(layout.workers, lt::rank()) >= 0; }

  // Wraps a failure of a server rank so the message names its role.
  template <typename F>
  auto named_failures(F f) {
    try {
      return f();
    } catch (const PeerFailure& e) {
      const int k = index_of(layout.servers, e.rank());
      if (k < 0) throw;
      throw PeerFailure(
          e.rank(), fmt::format("parameter server {} (rank {}) failed: {}", k, e.rank(), e.what()));
    }
  }

  std::vector<int64_t> splits_to_servers(int64_t extra, bool with_data) const {
    std::vector<int64_t> splits(static_cast<size_t>(lt::size()), 0);
    for (size_t k = 0; k < layout.servers.size(); ++k)
      splits[layout.servers[k]] = extra + (with_data ? layout.length[k] : 0);
    return splits;
  }

  // Worker side of push: [ctl, shard_k] per server.
  Tensor push_buffer(const Tensor& flat, double control) const {
    std::vector<Tensor> parts;
    auto opts = ::torch::TensorOptions().dtype(layout.dtype);
    for (size_t k = 0; k < layout.servers.size(); ++k) {
      parts.push_back(::torch::full({1}, control, opts));
      if (flat.defined()) parts.push_back(flat.narrow(0, layout.offset[k], layout.length[k]));
    }
    return ::torch::cat(parts);
  }

  // Server side: the average of the workers' slices, or nullopt on finish.
  std::optional<Tensor> average(const Tensor& received) const {
    const int64_t w = static_cast<int64_t>(layout.workers.size());
    if (received.numel() % w != 0)
      throw MismatchError(
          fmt::format("parameter server: {} elements from {} workers", received.numel(), w));
    Tensor rows = received.view({w, -1});
    Tensor control = rows.select(1, 0);
    if (control.eq(0).all().item<bool>()) return std::nullopt;
    if (!control.eq(1).all().item<bool>() || rows.size(1) != 1 + layout.length[my_server()])
      throw MismatchError(
          "parameter server: workers disagree about finishing or about the "
          "gradient size");
    return rows.narrow(1, 1, rows.size(1) - 1).sum(0).div_(static_cast<double>(w));
  }

  // One push/pull round on any rank. Returns the averaged flat gradient on
  // workers; false from `served` when the workers finished.
  Tensor round(const Tensor& flat, double control, bool* served) {
    const bool worker = is_worker();
    Tensor send = worker ? push_buffer(flat, control)
                         : ::torch::empty({0}, ::torch::TensorOptions().dtype(layout.dtype));
    auto splits = worker ? splits_to_servers(1, control != 0)
                         : std::vector<int64_t>(static_cast<size_t>(lt::size()), 0);
    Tensor got = named_failures([&] { return lt::alltoall(send, splits, name + ".push"); });
    std::optional<Tensor> avg;
    const int k = my_server();
    if (k >= 0) {
      avg = average(got);
      if (served) *served = avg.has_value();
    }
    if (control == 0 || (k >= 0 && !avg)) return Tensor();
    std::vector<int64_t> back(static_cast<size_t>(lt::size()), 0);
    Tensor reply = ::torch::empty({0}, ::torch::TensorOptions().dtype(layout.dtype));
    if (k >= 0) {
      for (int w : layout.workers) back[w] = layout.length[k];
      reply = avg->repeat({static_cast<int64_t>(layout.workers.size())});
    }
    return named_failures([&] { return lt::alltoall(reply, back, name + ".pull"); });
  }
};

bool serve_if_dedicated_server() {
  const int dedicated = dedicated_servers();
  if (dedicated == 0) return false;
  if (!workers_group()) {
    std::vector<int> ranks;
    for (int r = 0; r < lt::size() - dedicated; ++r) ranks.push_back(r);
    workers_group() = Group::create(ranks);
  }
  if (!is_dedicated_server()) return false;
  ParameterServer::Impl server;
  server.name = "ps";
  server.layout = agree_layout(0, ::torch::kFloat32, 0, server.name);
  for (bool served = true; served;) server.round(Tensor(), 1, &served);
  return true;
}

ParameterServer::ParameterServer(::torch::optim::Optimizer& optimizer,
                                 const ::torch::nn::Module& module, ParameterServerOptions options)
    : ParameterServer(optimizer, trainable_parameters(module), std::move(options)) {}

ParameterServer::ParameterServer(::torch::optim::Optimizer& optimizer, NamedParameters named,
                                 ParameterServerOptions options)
    : optimizer_(optimizer), impl_(std::make_unique<Impl>()) {
  if (named.empty()) throw InvalidArgument("ParameterServer: no parameters");
  if (is_dedicated_server())
    throw InvalidArgument(
        "ParameterServer: this rank is a dedicated server; call "
        "serve_if_dedicated_server() instead");
  if (options.servers < 0)
    throw InvalidArgument(fmt::format("ParameterServer: servers={} must be >= 0", options.servers));
  int64_t elements = 0;
  const auto dtype = named.front().second.scalar_type();
  for (const auto& [n, p] : named) {
    if (p.scalar_type() != dtype || !p.is_floating_point())
      throw InvalidArgument(fmt::format("ParameterServer: parameter {} is {}; all must be {}", n,
                                        c10::toString(p.scalar_type()), c10::toString(dtype)));
    elements += p.numel();
  }
  impl_->named = std::move(named);
  impl_->name = options.name;
  impl_->layout = lt::size() > 1 ? agree_layout(elements, dtype, options.servers, options.name)
                                 : make_layout(elements, dtype, 1);
}

ParameterServer::~ParameterServer() {
  try {
    finish();
  } catch (...) {  // a dead peer was reported by the failed step
  }
}

void ParameterServer::synchronize() {
  if (lt::size() == 1) return;
  std::vector<Tensor> flat_parts;
  for (auto& [n, p] : impl_->named) {
    const Tensor& g = p.grad();
    flat_parts.push_back(g.defined() ? g.reshape({-1}) : ::torch::zeros({p.numel()}, p.options()));
  }
  Tensor averaged = impl_->round(::torch::cat(flat_parts), 1, nullptr);
  ::torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto& [n, p] : impl_->named) {
    Tensor slice = averaged.narrow(0, offset, p.numel()).view(p.sizes());
    if (p.grad().defined())
      p.mutable_grad().copy_(slice);
    else
      p.mutable_grad() = slice.clone();
    offset += p.numel();
  }
}

void ParameterServer::step() {
  synchronize();
  optimizer_.step();
}

void ParameterServer::zero_grad() { optimizer_.zero_grad(); }

void ParameterServer::finish() {
  if (impl_->finished || lt::size() == 1 || dedicated_servers() == 0) {
    impl_->finished = true;
    return;
  }
  impl_->finished = true;
  impl_->round(Tensor(), 0, nullptr);
}

int ParameterServer::num_servers() const { return static_cast<int>(impl_->layout.servers.size()); }
std::vector<int> ParameterServer::server_ranks() const { return impl_->layout.servers; }
int64_t ParameterServer::shard_elements(int k) const { return impl_->layout.length.at(k); }

}  // namespace lockstep::parallel
