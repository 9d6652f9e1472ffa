// Note [Closed forms]
// Bytes one rank sends per step, for a model of M parameter bytes, batch B
// per replica, N ranks (wire-byte conventions of lockstep/comm/traffic.h):
//   data, zero   2(N-1)/N · M           (allreduce = reduce-scatter + all-gather)
//                --compression fp16|bf16: half that; powersgd:R: 2(N-1)/N · 4 ·
//                sum of powersgd_wire_elements; onebit, onebit-adam and
//                onebit-lamb (past their warm-up): 2(N-1) · (L/(8N) + 4) for L parameters
//                (alltoall + allgather of signs and a scale); these from
//                lockstep/policy/compression.h, the runtime's own closed forms
//   fsdp         3(N-1)/N · M' with M' the padded parameter bytes (N equal
//                segments per unit): the all-gather before each unit's
//                forward and again before its backward, the reduce-scatter
//                of its gradient
//   ps           push: the gradient slices this worker does not own;
//                pull: as a server, its shard to every other worker
//                (colocated on all N: 2(N-1)/N · M; dedicated: M per worker)
//   tensor (T)   2(T-1)/T · 4B · (1568 + h2 + h2 + 10): the input-gradient
//                all-reduces of the two Column layers and the output
//                all-reduces of the two Row layers; plus 2(D-1)/D · its
//                parameter bytes with D data replicas
//   pipeline     4B · (features leaving the stage + features entering it):
//                activations forward, their gradients backward; plus the
//                data-parallel allreduce of the stage's parameters
#include "strategies.h"

#include <fmt/format.h>

#include <functional>

#include "lockstep/base/error.h"
#include "lockstep/optim/lamb.h"
#include "lockstep/policy/compression.h"
#include "lockstep/torch/torch.h"
#include "net.h"

namespace lockstep::examples {

namespace lt = lockstep::torch;
namespace lp = lockstep::parallel;
using ::torch::Tensor;

namespace {

int64_t bytes_of(const Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

int64_t total_bytes(const std::vector<Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += bytes_of(t);
  return n;
}

double allreduce_bytes(double bytes, int n) { return n > 1 ? 2.0 * (n - 1) / n * bytes : 0.0; }

Tensor loss_of(const Tensor& logits, const Tensor& y) {
  return ::torch::nn::functional::cross_entropy(logits, y);
}

// Sequential forward that also sums the layer outputs autograd keeps;
// `before` runs ahead of each layer (ZeRO waits there for its parameters).
Tensor forward_counting(::torch::nn::Sequential& net, Tensor x, int64_t* activation_bytes,
                        const std::function<void(const ::torch::nn::Module&)>& before = {}) {
  int64_t bytes = 0;
  for (auto& layer : *net) {
    if (before) before(*layer.ptr());
    x = layer.forward(x);
    bytes += bytes_of(x);
  }
  *activation_bytes = std::max(*activation_bytes, bytes);
  return x;
}

// The dense model, its layers checkpointed in segments with
// --checkpoint-activations K (each segment keeps only its input for backward).
::torch::nn::Sequential make_model(const StrategyFlags& f) {
  auto net = make_dense_net();
  return f.checkpoint_activations > 0 ? lp::checkpoint_layers(net, f.checkpoint_activations) : net;
}

// --compression for the data strategy's DistributedOptimizer (the planner's
// names; onebit-adam needs Adam, which every strategy here uses, and
// onebit-lamb LAMB, which replicated strategies then use instead).
lt::DistributedOptimizerOptions data_options(const std::string& compression) {
  lt::DistributedOptimizerOptions o;
  lt::set_compression(o, compression);
  o.onebit_adam.warmup_steps = 4;  // the test runs a dozen steps
  o.onebit_lamb.warmup_steps = 4;
  return o;
}

// data, zero and ps: every rank holds the whole model and trains on its shard.
class Replicated : public Strategy {
 public:
  explicit Replicated(const StrategyFlags& f) {
    ::torch::manual_seed(42);
    net_ = make_model(f);
    params_ = net_->parameters();
    if (f.compression == "onebit-lamb")
      optimizer_ =
          std::make_unique<lockstep::optim::Lamb>(params_, lockstep::optim::LambOptions(f.lr));
    else
      optimizer_ =
          std::make_unique<::torch::optim::Adam>(params_, ::torch::optim::AdamOptions(f.lr));
  }
  std::optional<double> train_step(const Tensor& x, const Tensor& y) override {
    zero_grad();
    auto loss = loss_of(forward_counting(net_, x, &peak_activation_bytes,
                                         [this](const ::torch::nn::Module& m) { before_layer(m); }),
                        y);
    loss.backward();
    step();
    return loss.item<double>();
  }
  std::optional<Tensor> predict(const Tensor& x) override {
    before_layer(*net_);
    return net_->forward(x);
  }
  double closed_form_bytes_per_step(int64_t) const override {
    return allreduce_bytes(static_cast<double>(param_bytes()), data_size);
  }

 protected:
  virtual void zero_grad() = 0;
  virtual void step() = 0;
  virtual void before_layer(const ::torch::nn::Module&) {}
  ::torch::nn::Sequential net_;
};

class Data : public Replicated {
 public:
  explicit Data(const StrategyFlags& f)
      : Replicated(f),
        dist_(*optimizer_, *net_, data_options(f.compression)),
        spec_(lockstep::policy::parse_compression(f.compression)) {
    data_rank = lt::rank();
    data_size = lt::size();
  }
  // What the compression puts on the wire (Note [Closed forms]).
  double closed_form_bytes_per_step(int64_t batch) const override {
    const auto& o = dist_.options();
    if (o.compression == lt::Compression::kFp16 || o.compression == lt::Compression::kBf16)
      return Replicated::closed_form_bytes_per_step(batch) / 2;
    if (!spec_.replaces_allreduce()) return Replicated::closed_form_bytes_per_step(batch);
    // The runtime's own closed forms (lockstep/policy/compression.h), past
    // any warm-up: the measured average includes the warm-up's whole steps.
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& p : params_) shapes.push_back(p.sizes().vec());
    double wire = 0;
    for (const auto& c : lockstep::policy::compressed_step(spec_, shapes, data_size))
      wire += static_cast<double>(c.wire_bytes);
    return wire;
  }

 private:
  void zero_grad() override { dist_.zero_grad(); }
  void step() override { dist_.step(); }
  lt::DistributedOptimizer dist_;
  lockstep::policy::CompressionSpec spec_;
};

class Zero : public Replicated {
 public:
  explicit Zero(const StrategyFlags& f)
      : Replicated(f), zero_(*optimizer_, *net_, {.stage = f.zero_stage}) {
    data_rank = lt::rank();
    data_size = lt::size();
    gather_overlap = zero_.overlaps_gather();
  }

 private:
  void zero_grad() override { zero_.zero_grad(); }
  void step() override { zero_.step(); }
  // The overlapped all-gather (LOCKSTEP_OVERLAP / lockstep run --overlap)
  // lands layer by layer as the forward reaches it.
  void before_layer(const ::torch::nn::Module& layer) override { zero_.wait_for(layer); }
  void settle() override { zero_.wait(); }
  lp::ShardedOptimizer zero_;
};

// Fully sharded: each rank keeps 1/N of every parameter, gradient and Adam
// state; a unit of --fsdp-unit layers is whole only while it computes.
class FullySharded : public Strategy {
 public:
  explicit FullySharded(const StrategyFlags& f) {
    ::torch::manual_seed(42);
    fsdp_.emplace(make_model(f), lp::FullyShardedOptions{.layers_per_unit = f.fsdp_unit});
    params_ = fsdp_->parameters();  // this rank's segments
    optimizer_ = std::make_unique<::torch::optim::Adam>(params_, ::torch::optim::AdamOptions(f.lr));
    data_rank = lt::rank();
    data_size = lt::size();
  }
  std::optional<double> train_step(const Tensor& x, const Tensor& y) override {
    fsdp_->zero_grad();
    auto loss = loss_of(fsdp_->forward(x), y);
    loss.backward();
    fsdp_->step(*optimizer_);
    return loss.item<double>();
  }
  std::optional<Tensor> predict(const Tensor& x) override {
    ::torch::NoGradGuard no_grad;
    return fsdp_->forward(x);
  }
  double closed_form_bytes_per_step(int64_t) const override {
    return 3.0 * (data_size - 1) * 4.0 * static_cast<double>(fsdp_->shard_elements());
  }

 private:
  std::optional<lp::FullyShardedModel> fsdp_;
};

class ParameterServerStrategy : public Replicated {
 public:
  explicit ParameterServerStrategy(const StrategyFlags& f)
      : Replicated(f), ps_(*optimizer_, *net_, {.servers = f.servers}) {
    workers = lp::workers();
    data_rank = workers.rank();
    data_size = workers.size();
  }
  void finish() override { ps_.finish(); }
  double closed_form_bytes_per_step(int64_t) const override {
    const auto servers = ps_.server_ranks();
    double elements = 0;
    for (size_t k = 0; k < servers.size(); ++k) {
      if (servers[k] != lt::rank())
        elements += 1 + static_cast<double>(ps_.shard_elements(static_cast<int>(k)));
      else
        elements += static_cast<double>(ps_.shard_elements(static_cast<int>(k))) * (data_size - 1);
    }
    return elements * 4;
  }

 private:
  void zero_grad() override { ps_.zero_grad(); }
  void step() override { ps_.step(); }
  lp::ParameterServer ps_;
};

lp::Mesh mesh_for(const StrategyFlags& f, const char* dim) {
  std::string spec = f.mesh.empty() ? fmt::format("data=1,{}={}", dim, lt::size()) : f.mesh;
  lp::Mesh mesh = lp::Mesh::parse(spec);
  for (const auto& d : mesh.dims())
    if (d.name != "data" && d.name != dim)
      throw InvalidArgument(fmt::format("--strategy {} takes a mesh of data and {}, not '{}'",
                                        f.strategy, dim, d.name));
  if (!mesh.has(dim))
    throw InvalidArgument(fmt::format("--mesh {} has no '{}' dimension", spec, dim));
  if (!mesh.has("data")) mesh = lp::Mesh::parse(spec + ",data=1");
  return mesh;
}

class Tensorwise : public Strategy {
 public:
  explicit Tensorwise(const StrategyFlags& f) : mesh_(mesh_for(f, "tensor")) {
    ::torch::manual_seed(42);
    net_ = make_tensor_net(mesh_.group("tensor"));
    params_ = net_->parameters();
    optimizer_ = std::make_unique<::torch::optim::Adam>(params_, ::torch::optim::AdamOptions(f.lr));
    dist_.emplace(*optimizer_, *net_,
                  lt::DistributedOptimizerOptions{.group = mesh_.group("data")});
    data_rank = mesh_.coordinate("data");
    data_size = mesh_.size("data");
  }
  std::optional<double> train_step(const Tensor& x, const Tensor& y) override {
    dist_->zero_grad();
    auto loss = loss_of(forward_counting(net_, x, &peak_activation_bytes), y);
    loss.backward();
    dist_->step();
    return loss.item<double>();
  }
  std::optional<Tensor> predict(const Tensor& x) override {
    Tensor out = net_->forward(x);  // every tensor rank takes part
    if (mesh_.coordinate("tensor") != 0) return std::nullopt;
    return out;
  }
  double closed_form_bytes_per_step(int64_t batch) const override {
    const NetShape s;
    const double activations = 4.0 * batch * static_cast<double>(s.flat() + 2 * s.h2 + 10);
    return allreduce_bytes(activations, mesh_.size("tensor")) +
           allreduce_bytes(static_cast<double>(param_bytes()), data_size);
  }

 private:
  lp::Mesh mesh_;
  ::torch::nn::Sequential net_;
  std::optional<lt::DistributedOptimizer> dist_;
};

class Pipelined : public Strategy {
 public:
  explicit Pipelined(const StrategyFlags& f) : mesh_(mesh_for(f, "pipeline")) {
    ::torch::manual_seed(42);
    auto net = make_model(f);  // --partition counts segments when checkpointed
    layer_features_ = output_features(net);
    pipe_.emplace(net, lp::PipelineOptions{.micro_batches = f.micro_batches,
                                           .schedule = lp::parse_schedule(f.schedule),
                                           .partition = f.partition,
                                           .group = mesh_.group("pipeline")});
    params_ = pipe_->parameters();
    optimizer_ = std::make_unique<::torch::optim::Adam>(params_, ::torch::optim::AdamOptions(f.lr));
    dist_.emplace(*optimizer_, pipe_->named_parameters(),
                  lt::DistributedOptimizerOptions{.backward_passes_per_step = f.micro_batches,
                                                  .group = mesh_.group("data")});
    data_rank = mesh_.coordinate("data");
    data_size = mesh_.size("data");
  }
  std::optional<double> train_step(const Tensor& x, const Tensor& y) override {
    dist_->zero_grad();
    const double loss = pipe_->train_step(x, y, loss_of);
    dist_->step();
    peak_activation_bytes =
        std::max(peak_activation_bytes, pipe_->last_step().peak_activation_bytes);
    if (!pipe_->is_last()) return std::nullopt;
    return loss;
  }
  std::optional<Tensor> predict(const Tensor& x) override {
    Tensor out = pipe_->forward(x);
    if (!pipe_->is_last()) return std::nullopt;
    return out;
  }
  std::optional<double> idle_fraction() const override {
    return pipe_->last_step().idle_fraction();
  }
  double closed_form_bytes_per_step(int64_t batch) const override {
    auto [first, count] = pipe_->layers_of(pipe_->stage());
    double features = 0;
    if (!pipe_->is_last()) features += static_cast<double>(layer_features_[first + count - 1]);
    if (!pipe_->is_first()) features += static_cast<double>(layer_features_[first - 1]);
    return 4.0 * batch * features + allreduce_bytes(static_cast<double>(param_bytes()), data_size);
  }

 private:
  static std::vector<int64_t> output_features(::torch::nn::Sequential& net) {
    ::torch::NoGradGuard no_grad;
    std::vector<int64_t> out;
    Tensor x = ::torch::zeros({1, 1, 28, 28});
    for (auto& layer : *net) {
      x = layer.forward(x);
      out.push_back(x.numel());
    }
    return out;
  }
  lp::Mesh mesh_;
  std::vector<int64_t> layer_features_;
  std::optional<lp::Pipeline> pipe_;
  std::optional<lt::DistributedOptimizer> dist_;
};

}  // namespace

int64_t Strategy::param_bytes() const { return total_bytes(params_); }

int64_t Strategy::optimizer_state_bytes() const { return lp::optimizer_state_bytes(*optimizer_); }

int data_replicas(const StrategyFlags& f) {
  if (f.strategy == "ps") return lt::size() - lp::dedicated_servers();
  if (f.strategy != "tensor" && f.strategy != "pipeline") return lt::size();
  if (f.mesh.empty()) return 1;
  for (const auto& d : lp::Mesh::parse_dims(f.mesh, lt::size()))
    if (d.name == "data") return d.size;
  return 1;
}

std::unique_ptr<Strategy> make_strategy(const StrategyFlags& f) {
  if (f.compression != "none" && f.strategy != "data")
    throw InvalidArgument(
        fmt::format("--compression applies to --strategy data, not {}", f.strategy));
  // A tensor-parallel forward communicates: a replay would repeat its allreduces.
  if (f.checkpoint_activations > 0 && f.strategy == "tensor")
    throw InvalidArgument("--checkpoint-activations: not with --strategy tensor");
  if (f.strategy == "data") return std::make_unique<Data>(f);
  if (f.strategy == "zero") return std::make_unique<Zero>(f);
  if (f.strategy == "fsdp") return std::make_unique<FullySharded>(f);
  if (f.strategy == "ps") return std::make_unique<ParameterServerStrategy>(f);
  if (f.strategy == "tensor") return std::make_unique<Tensorwise>(f);
  if (f.strategy == "pipeline") return std::make_unique<Pipelined>(f);
  throw InvalidArgument(fmt::format(
      "--strategy {} is not one of data, tensor, pipeline, zero, fsdp, ps", f.strategy));
}

}  // namespace lockstep::examples
