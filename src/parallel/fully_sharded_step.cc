// FullyShardedModel: the optimizer's step on the shards (in host memory with
// offload_optimizer), their gradients taken from fully_sharded_grad.cc, and
// accessors.
#include <fmt/format.h>

#include <set>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "parallel/fully_sharded_impl.h"
#include "parallel/sharded_optimizer_impl.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;

namespace {

void check_optimizer(const FullyShardedModel::Impl& m, const ::torch::optim::Optimizer& optimizer) {
  if (m.element && !is_elementwise(optimizer))
    throw InvalidArgument(
        "FullyShardedModel: this optimizer may use whole-tensor norms (LAMB, "
        "LARS...), which element shards would change; construct the model with "
        "granularity = ShardGranularity::kTensor");
  std::set<const void*> mine;
  for (const auto& piece : m.pieces) mine.insert(piece.tensor.unsafeGetTensorImpl());
  size_t updated = 0;
  for (const auto& group : optimizer.param_groups())
    for (const Tensor& p : group.params()) {
      if (!mine.count(p.unsafeGetTensorImpl()))
        throw InvalidArgument(
            "FullyShardedModel::step: the optimizer updates a tensor that is "
            "not one of this model's shards; build it on fsdp.parameters()");
      ++updated;
    }
  if (updated != mine.size())
    throw InvalidArgument(
        fmt::format("FullyShardedModel::step: the optimizer updates {} of the "
                    "{} shards of parameters()",
                    updated, mine.size()));
}

}  // namespace

void FullyShardedModel::step(::torch::optim::Optimizer& optimizer) {
  Impl& m = *impl_;
  check_optimizer(m, optimizer);
  m.finish_gradients();
  ::torch::NoGradGuard no_grad;
  for (auto& unit : m.units) {
    if (unit.params.empty()) continue;
    if (m.offload) {  // the optimizer steps the host copy
      if (!unit.host_grad.defined())
        unit.host_grad = ::torch::empty_like(unit.shard, unit.shard.options().pinned_memory(true));
      unit.host_grad.copy_(unit.grad_shard);
    }
  }
  // A unit gathered outside its forward (a prefetch of a forward after the
  // last backward) would keep this step's values, and its all-gather may
  // still read the segment the optimizer is about to change.
  for (int u = 0; u < static_cast<int>(m.units.size()); ++u) {
    if (m.units[u].residence == FullyShardedModel::Impl::Residence::kept) continue;
    if (m.units[u].gathering.valid()) m.gather(u, true);
    m.release(u);
  }
  m.prefetching = -1;
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    auto& piece = m.pieces[i];
    Tensor g = m.piece_grad(i);
    if (m.offload) {  // the same slice of the host copy
      const auto& unit = m.units[m.unit_of[piece.param]];
      g = unit.host_grad.narrow(0, g.storage_offset() - unit.grad_shard.storage_offset(),
                                piece.length);
    }
    piece.tensor.mutable_grad() = m.element ? g : g.view(piece.tensor.sizes());
  }
  optimizer.step();
  for (auto& unit : m.units) {
    if (m.offload && !unit.params.empty())
      unit.device_shard.copy_(unit.shard, /*non_blocking=*/true);
    unit.grad_shard = Tensor();  // the pieces keep theirs; the next pass starts a new sum
  }
  m.passes = 0;
  m.reduced = false;
  if (m.modules) m.freeze_order();
  // The root, and units kept whole by gather_full(), stay gathered: the
  // updated values now (a kept unit's forward does not gather again).
  for (int u = 0; u < static_cast<int>(m.units.size()); ++u)
    if (m.units[u].residence == FullyShardedModel::Impl::Residence::kept) m.refresh(u);
}

void FullyShardedModel::zero_grad() {
  impl_->land_reduce();  // a pass's reduce-scatter must not land into the new sum
  for (auto& piece : impl_->pieces) piece.tensor.mutable_grad() = Tensor();
  for (auto& unit : impl_->units) {
    unit.grad_shard = Tensor();
    unit.ready = 0;
    unit.sent = false;
  }
  impl_->passes = 0;
  impl_->reduced = false;
  impl_->pass_open = false;  // a backward that threw never reached end_pass()
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
    impl_->units[u].residence = Impl::Residence::kept;
  }
}

void FullyShardedModel::release_full() {
  for (int u = 0; u < static_cast<int>(impl_->units.size()); ++u) {
    // The root is always gathered; a unit without parameters has no buffer.
    // A released one stays so (its prefetch, if one is in flight, lands at
    // its next gather).
    Impl::Unit& unit = impl_->units[u];
    if (unit.root || unit.params.empty()) continue;
    if (unit.residence == Impl::Residence::kept) unit.residence = Impl::Residence::gathered;
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
