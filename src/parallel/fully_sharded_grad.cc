// FullyShardedModel's gradients: per backward pass, a reduce-scatter per
// unit (at most one in flight) summed into this rank's gradient segment;
// the replicas' average (HSDP) and clip_grad_norm once the passes are done.
//
// Note [FSDP passes]
// Gradient accumulation: k backward passes per step() (micro-batches) are
// reduced one pass at a time, so a unit's flat gradient is whole only while
// its backward runs and the memory stays (P + G)/N plus the units in flight.
// Each pass's averaged segment is added into `grad_shard`: the sum over
// passes of the ranks' average, what data parallelism computes with
// backward_passes_per_step = k (it sums the passes, then averages). The
// first backward hook of a pass (open_pass) queues end_pass() on autograd's
// engine, which runs it once the pass is over: it sends zeros for every unit
// the pass did not reach (every rank issues the same reduce-scatters per
// pass) and resets the per-pass state. finish_gradients() (step() or
// clip_grad_norm()) lands the last reduce-scatter and averages the segments
// across the replicas; after it a backward is refused until step().
#include <fmt/format.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/graph_task.h>

#include <limits>
#include <unordered_set>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/base/log.h"
#include "parallel/fully_sharded_impl.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;

void FullyShardedModel::Impl::open_pass() {
  if (reduced)
    throw InvalidArgument(
        "FullyShardedModel: a backward after clip_grad_norm() and before "
        "step(); clip once, after the last micro-batch's backward");
  if (pass_open) return;
  pass_open = true;
  if (!loss_checked) check_loss_dtype();
  ::torch::autograd::Engine::get_default_engine().queue_callback([this] { end_pass(); });
}

// The loss's node is the one node of the pass's graph that no other node of
// it points to (autograd's root points to it); its input is the loss.
void FullyShardedModel::Impl::check_loss_dtype() {
  loss_checked = true;
  if (!modules || compute == dtype) return;
  const auto* nodes = ::torch::autograd::get_current_graph_task_nodes_in_graph();
  if (nodes == nullptr) return;
  std::unordered_set<const ::torch::autograd::Node*> pointed;
  for (const auto* node : *nodes)
    for (const auto& edge : node->next_edges()) pointed.insert(edge.function.get());
  for (const auto* node : *nodes) {
    if (pointed.count(node) || node->num_inputs() == 0) continue;
    if (node->input_metadata(0).dtype() != caffe2::TypeMeta::fromScalarType(compute)) continue;
    log(LogLevel::kWarning,
        "FullyShardedModel: the loss is computed in {} (the model's output is in compute_dtype "
        "over a module); the loss and its gradient are quantized: cast the output for the loss, "
        "loss_fn(net->forward(x).to(torch::k{}), y)",
        c10::toString(compute), c10::toString(dtype));
    return;
  }
}

void FullyShardedModel::Impl::end_pass() {
  pass_open = false;
  for (int u = static_cast<int>(units.size()); u-- > 0;)  // backward's order
    if (!units[u].params.empty() && !units[u].sent) send(u);
  for (auto& unit : units) {
    unit.ready = 0;
    unit.sent = false;
  }
  ++passes;
}

// A hook on the parameter's gradient accumulator: this pass finished it.
void FullyShardedModel::Impl::on_gradient(int param) {
  open_pass();
  Unit& unit = units[unit_of[param]];
  if (unit.sent)
    throw InvalidArgument(fmt::format(
        "FullyShardedModel: gradient of {} produced again in one backward pass after its unit "
        "was reduced",
        names[param]));
  if (++unit.ready == static_cast<int>(unit.params.size())) send(unit_of[param]);
}

// pass_shard may be in reduce_dtype; the sum over passes is in the masters'.
void FullyShardedModel::Impl::accumulate(Unit& unit, const Tensor& pass_shard) {
  ::torch::NoGradGuard no_grad;
  if (unit.grad_shard.defined())
    unit.grad_shard.add_(pass_shard);
  else
    unit.grad_shard = pass_shard.scalar_type() == dtype ? pass_shard : pass_shard.to(dtype);
}

// What the reduce-scatter sends. Without reduce_dtype: the flat gradient in
// the masters' dtype, averaged by the collective. With it: divided by n
// first (one rounding, DistributedOptimizer's order: the half-precision sum
// stays in range), then summed.
Tensor FullyShardedModel::Impl::wire_gradient(const Tensor& grad_full) const {
  const Tensor wide = grad_full.scalar_type() == dtype ? grad_full : grad_full.to(dtype);
  if (!options->reduce_dtype) return wide;
  return (n == 1 ? wide : wide / n).to(*options->reduce_dtype);
}

void FullyShardedModel::Impl::land_reduce() {
  if (reducing_unit < 0) return;
  Unit& unit = units[reducing_unit];
  reducing_unit = -1;
  wait_unit_collective(unit.reducing);
  unit.reducing = {};  // frees the flat gradient it kept alive
  accumulate(unit, unit.incoming);
  unit.incoming = Tensor();
}

void FullyShardedModel::Impl::watch_process() {
  watch_uncaught();
  shutdown_hook = lt::add_shutdown_hook([this] { settle_in_flight(); });
}

void FullyShardedModel::Impl::unwatch_process() {
  lt::remove_shutdown_hook(shutdown_hook);
  unwatch_uncaught();
}

void FullyShardedModel::Impl::settle_in_flight() {
  land_reduce();
  for (int u = 0; u < static_cast<int>(units.size()); ++u)
    if (units[u].gathering.valid()) gather(u, true);
}

// The unit's gradient is complete for this pass: release its parameters and
// reduce-scatter the flat gradient into this pass's segment.
void FullyShardedModel::Impl::send(int u) {
  Unit& unit = units[u];
  LOCKSTEP_DCHECK(!unit.sent, "unit {} sent twice in one pass", u);
  if (unit.gathering.valid()) gather(u, true);  // prefetched but never used
  release(u);
  if (!unit.grad_full.defined()) {  // no backward reached it, or the root unit
    unit.grad_full = ::torch::zeros({unit.layout.shard * n}, unit.full.options());
    ::torch::NoGradGuard no_grad;
    for (const ShardPlacement& place : unit.layout.placements) {
      const Tensor& g = params[place.param].grad();
      if (place.param_offset == 0 && g.defined())
        unit.grad_full.narrow(0, place.flat_offset, g.numel()).copy_(g.reshape({-1}));
    }
  }
  for (int p : unit.params) params[p].mutable_grad() = Tensor();
  land_reduce();
  // Mixed precision: averaged in the masters' dtype (or reduce_dtype), summed
  // over passes in the masters'.
  const Tensor grad = wire_gradient(unit.grad_full);
  Tensor pass_shard = ::torch::empty({unit.layout.shard}, grad.options());
  if (n == 1) {
    pass_shard.copy_(grad);
    accumulate(unit, pass_shard);
  } else {
    unit.incoming = pass_shard;
    unit.reducing = lt::reduce_scatter_into_async(
        grad, pass_shard, fmt::format("{}.rs.{}", options->name, unit.tag),
        {.op = options->reduce_dtype ? lt::ReduceOp::kSum : lt::ReduceOp::kAverage,
         .process_set = options->group.id()});
    reducing_unit = u;
  }
  unit.grad_full = Tensor();
  unit.sent = true;
}

void FullyShardedModel::Impl::finish_gradients() {
  if (reduced) return;
  LOCKSTEP_DCHECK(!pass_open, "FullyShardedModel: gradients finished inside a backward pass");
  if (passes == 0) end_pass();  // no backward reached the model on this rank: zeros
  land_reduce();
  if (options->replicate && options->replicate->size() > 1) average_replicas();
  reduced = true;
}

// HSDP: the segments averaged across the replicas, in reduce_dtype when set
// (divided first, summed, cast back, as the reduce-scatter does).
void FullyShardedModel::Impl::average_replicas() {
  const int r = options->replicate->size();
  const auto wire = options->reduce_dtype;
  std::vector<Tensor> shards;
  std::vector<std::string> tags;
  for (auto& unit : units)
    if (!unit.params.empty()) {
      shards.push_back(wire ? (unit.grad_shard / r).to(*wire) : unit.grad_shard);
      tags.push_back(fmt::format("{}.replicas.{}", options->name, unit.tag));
    }
  const auto op = wire ? lt::ReduceOp::kSum : lt::ReduceOp::kAverage;
  lt::grouped_allreduce_async_(shards, tags, {.op = op, .process_set = options->replicate->id()})
      .wait();
  if (!wire) return;
  ::torch::NoGradGuard no_grad;
  size_t i = 0;
  for (auto& unit : units)
    if (!unit.params.empty()) unit.grad_shard.copy_(shards[i++]);
}

Tensor FullyShardedModel::Impl::piece_grad(size_t i) const {
  const auto& piece = pieces[i];
  const Unit& unit = units[unit_of[piece.param]];
  const int64_t begin = piece.tensor.storage_offset() - unit.shard.storage_offset();
  LOCKSTEP_DCHECK(begin >= 0 && begin + piece.length <= unit.layout.shard,
                  "piece {} at {}+{} outside its unit's segment of {}", i, begin, piece.length,
                  unit.layout.shard);
  return unit.grad_shard.narrow(0, begin, piece.length);
}

// The global norm from this rank's pieces (padding is no piece), one
// allreduce over the group: the replicas hold the same averaged segments,
// and the root unit is sharded like any unit, so each element counts once.
double FullyShardedModel::clip_grad_norm(double max_norm, double norm_type) {
  if (!(norm_type > 0))
    throw InvalidArgument(
        fmt::format("FullyShardedModel::clip_grad_norm: norm_type={} must be > "
                    "0 (2, or infinity for the max norm)",
                    norm_type));
  Impl& m = *impl_;
  m.finish_gradients();
  const bool inf = norm_type == std::numeric_limits<double>::infinity();
  const auto acc = m.dtype == ::torch::kFloat64 ? ::torch::kFloat64 : ::torch::kFloat32;
  ::torch::NoGradGuard no_grad;
  Tensor partial = ::torch::zeros({}, ::torch::TensorOptions().dtype(acc).device(m.device));
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const Tensor g = m.piece_grad(i).to(acc).abs();
    partial = inf ? ::torch::maximum(partial, g.max()) : partial + g.pow(norm_type).sum();
  }
  if (m.n > 1)
    partial = lt::allreduce(partial.reshape({1}), options_.name + ".clip",
                            {.op = inf ? lt::ReduceOp::kMax : lt::ReduceOp::kSum,
                             .process_set = options_.group.id()})
                  .reshape({});
  const Tensor total = inf ? partial : partial.pow(1.0 / norm_type);
  // LibTorch's clip_grad_norm_: coefficient max_norm / (norm + 1e-6), at most 1.
  const Tensor coef = ::torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0).to(m.dtype);
  for (auto& unit : m.units)
    if (!unit.params.empty()) unit.grad_shard.mul_(coef);
  return total.item<double>();
}

}  // namespace lockstep::parallel
