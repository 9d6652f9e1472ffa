// FullyShardedModel: gradients into the shards (reduce-scatter per unit, at
// most one in flight; the replicas' average for HSDP), the optimizer's step
// on the shards (in host memory with offload_optimizer), and accessors.
#include <fmt/format.h>

#include <set>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "parallel/fully_sharded_impl.h"
#include "parallel/sharded_optimizer_impl.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;

// A hook on the parameter's gradient accumulator: backward finished it.
void FullyShardedModel::Impl::on_gradient(int param) {
  Unit& unit = units[unit_of[param]];
  if (unit.sent)
    throw InvalidArgument(fmt::format(
        "FullyShardedModel: gradient of {} produced again after its unit was reduced; run one "
        "backward per step()", names[param]));
  if (++unit.ready == static_cast<int>(unit.params.size())) send(unit_of[param]);
}

void FullyShardedModel::Impl::land_reduce() {
  if (reducing_unit < 0) return;
  Unit& unit = units[reducing_unit];
  reducing_unit = -1;
  unit.reducing.wait();
  unit.reducing = {};  // frees the flat gradient it kept alive
}

// The unit's gradient is complete: release its parameters and reduce-scatter
// the flat gradient into this rank's segment.
void FullyShardedModel::Impl::send(int u) {
  Unit& unit = units[u];
  LOCKSTEP_DCHECK(!unit.sent, "unit {} sent twice", u);
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
  unit.grad_shard = ::torch::empty({unit.layout.shard}, unit.full.options().dtype(dtype));
  if (n == 1) {
    unit.grad_shard.copy_(unit.grad_full);
  } else {
    // Mixed precision: averaged in the masters' dtype.
    const Tensor grad = unit.grad_full.scalar_type() == dtype ? unit.grad_full
                                                              : unit.grad_full.to(dtype);
    unit.reducing = lt::reduce_scatter_into_async(
        grad, unit.grad_shard, fmt::format("{}.rs.{}", options->name, u),
        {.op = lt::ReduceOp::kAverage, .process_set = options->group.id()});
    reducing_unit = u;
  }
  unit.grad_full = Tensor();
  unit.sent = true;
}

namespace {

void check_optimizer(const FullyShardedModel::Impl& m, const ::torch::optim::Optimizer& optimizer) {
  if (m.element && !is_elementwise(optimizer))
    throw InvalidArgument("FullyShardedModel: this optimizer may use whole-tensor norms (LAMB, "
                          "LARS...), which element shards would change; construct the model with "
                          "granularity = ShardGranularity::kTensor");
  std::set<const void*> mine;
  for (const auto& piece : m.pieces) mine.insert(piece.tensor.unsafeGetTensorImpl());
  size_t updated = 0;
  for (const auto& group : optimizer.param_groups())
    for (const Tensor& p : group.params()) {
      if (!mine.count(p.unsafeGetTensorImpl()))
        throw InvalidArgument("FullyShardedModel::step: the optimizer updates a tensor that is "
                              "not one of this model's shards; build it on fsdp.parameters()");
      ++updated;
    }
  if (updated != mine.size())
    throw InvalidArgument(fmt::format("FullyShardedModel::step: the optimizer updates {} of the "
                                      "{} shards of parameters()", updated, mine.size()));
}

}  // namespace

void FullyShardedModel::step(::torch::optim::Optimizer& optimizer) {
  Impl& m = *impl_;
  check_optimizer(m, optimizer);
  for (int u = static_cast<int>(m.units.size()); u-- > 0;)  // backward's order
    if (!m.units[u].params.empty() && !m.units[u].sent) m.send(u);
  m.land_reduce();
  if (options_.replicate && options_.replicate->size() > 1) {  // HSDP: average the replicas
    std::vector<Tensor> shards;
    std::vector<std::string> names;
    for (size_t u = 0; u < m.units.size(); ++u)
      if (!m.units[u].params.empty()) {
        shards.push_back(m.units[u].grad_shard);
        names.push_back(fmt::format("{}.replicas.{}", options_.name, u));
      }
    lt::grouped_allreduce_async_(shards, names, {.op = lt::ReduceOp::kAverage,
                                                 .process_set = options_.replicate->id()})
        .wait();
  }
  ::torch::NoGradGuard no_grad;
  for (auto& unit : m.units) {
    if (unit.params.empty()) continue;
    if (m.offload) {  // the optimizer steps the host copy
      if (!unit.host_grad.defined())
        unit.host_grad = ::torch::empty_like(unit.shard, unit.shard.options().pinned_memory(true));
      unit.host_grad.copy_(unit.grad_shard);
    }
  }
  for (auto& piece : m.pieces) {
    const auto& unit = m.units[m.unit_of[piece.param]];
    const Tensor& grad = m.offload ? unit.host_grad : unit.grad_shard;
    const int64_t begin = piece.tensor.storage_offset() - unit.shard.storage_offset();
    Tensor g = grad.narrow(0, begin, piece.length);
    piece.tensor.mutable_grad() = m.element ? g : g.view(piece.tensor.sizes());
  }
  optimizer.step();
  for (auto& unit : m.units) {
    if (m.offload && !unit.params.empty()) unit.device_shard.copy_(unit.shard, /*non_blocking=*/true);
    unit.ready = 0;
    unit.sent = false;
  }
  if (m.modules) m.freeze_order();
  for (int u = 0; u < static_cast<int>(m.units.size()); ++u)
    if (m.units[u].root) {  // stays gathered: the updated values now
      m.units[u].gathered = false;
      m.gather(u, true);
    }
}

void FullyShardedModel::zero_grad() {
  for (auto& piece : impl_->pieces) piece.tensor.mutable_grad() = Tensor();
  for (auto& unit : impl_->units) {
    unit.grad_shard = Tensor();
    unit.ready = 0;
    unit.sent = false;
  }
}

std::vector<Tensor> FullyShardedModel::parameters() const {
  std::vector<Tensor> out;
  for (const auto& piece : impl_->pieces) out.push_back(piece.tensor);
  return out;
}

void FullyShardedModel::gather_full() {
  for (int u = 0; u < static_cast<int>(impl_->units.size()); ++u) {
    if (impl_->units[u].params.empty()) continue;
    impl_->gather(u, true);
    impl_->units[u].keep = true;
  }
}

void FullyShardedModel::release_full() {
  for (int u = 0; u < static_cast<int>(impl_->units.size()); ++u) {
    if (impl_->units[u].root) continue;  // always gathered
    impl_->units[u].keep = false;
    impl_->release(u);
  }
}

int FullyShardedModel::units() const { return static_cast<int>(impl_->units.size()); }

bool FullyShardedModel::element_granularity() const { return impl_->element; }

int64_t FullyShardedModel::max_unit_elements() const {
  int64_t most = 0;
  for (const auto& unit : impl_->units) {
    int64_t elements = 0;
    for (int p : unit.params) elements += impl_->params[p].numel();
    most = std::max(most, elements);
  }
  return most;
}

int64_t FullyShardedModel::shard_elements() const {
  int64_t total = 0;
  for (const auto& unit : impl_->units) total += unit.params.empty() ? 0 : unit.layout.shard;
  return total;
}

}  // namespace lockstep::parallel
