// Note [FSDP units]
// A unit is `layers_per_unit` consecutive layers of the Sequential. Its
// parameters are laid out as ZeRO lays out one bucket (plan_shards with one
// bucket per unit, shard_layout.h): a flat buffer `full` of n segments of
// `shard` elements, segment r this rank's if r == me. Each model parameter is
// turned (set_data) into a view of `full`, so autograd, names, checkpoints
// and Checkpointed layers keep seeing the model's own tensors. `full`'s
// StorageImpl is permanent but its memory comes and goes: gather() gives it
// an allocation (made on the training thread, so AllocationTracker counts
// it) and the engine's all-gather writes the segments straight into it;
// release() drops the allocation. Views autograd saved in forward point into
// the same StorageImpl, so once the unit is gathered again before its
// backward (UnitBoundary, an identity node on the unit's output whose
// backward runs before any of the unit's own), they read the gathered values;
// no version counter moves (the storage's data pointer changes, not the
// tensors), so autograd's in-place checks are not disturbed.
// Gradients: begin_backward() points each parameter's .grad at a slice of
// one zeroed flat buffer, so AccumulateGrad adds into it in place; when the
// last parameter of the unit has its gradient (a hook on its accumulator),
// the flat gradient is reduce-scattered into `grad_shard` (at most one in
// flight) and the unit's parameters are released.
// Over a module (fully_sharded_unit.cc), the units are FullyShardedUnit
// submodules whose forward calls enter() and leave(): the same gather,
// release and UnitBoundary, in the order the model's forward calls them;
// prefetch follows the order recorded on the first forward, call by call
// (next_call), and is waited for when the calling unit leaves. The root unit
// (parameters outside every unit) is always Residence::kept: never released,
// its gradient taken from AccumulateGrad's .grad when it is sent, its buffer
// all-gathered again at the end of step() (refresh).
// Every rank issues the same collectives in the same order: forward gathers
// in unit order, backward gathers and reduce-scatters in reverse, and step()
// sends (zeros) for any unit whose backward did not run, so a rank whose loss
// skipped a unit does not hang the others.
#include "lockstep/parallel/fully_sharded.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/torch/objects.h"
#include "parallel/fully_sharded_impl.h"
#include "parallel/sharded_optimizer_impl.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;
using ::torch::autograd::AutogradContext;
using ::torch::autograd::variable_list;

namespace {

void allocate_storage(const Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (s->nbytes() == bytes && s->data() != nullptr) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

void release_storage(const Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

// Identity in forward; in backward, gathers its unit before the unit's own
// backward nodes run (they consume the gradient this node passes on).
struct UnitBoundary : ::torch::autograd::Function<UnitBoundary> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, int64_t impl, int64_t unit) {
    ctx->saved_data["impl"] = impl;
    ctx->saved_data["unit"] = unit;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* impl = reinterpret_cast<FullyShardedModel::Impl*>(ctx->saved_data["impl"].toInt());
    impl->begin_backward(static_cast<int>(ctx->saved_data["unit"].toInt()));
    return {grads[0], Tensor(), Tensor()};
  }
};

}  // namespace

void wait_unit_collective(lt::TensorHandle& handle) {
  constexpr const char* kRule =
      " (FullyShardedModel: every rank must run every forward and backward of an FSDP model, "
      "calling its units in the same order: each unit's all-gather (.ag.) and reduce-scatter "
      "(.rs.), named by unit number and module, is a collective over the group)";
  try {
    handle.wait();
  } catch (const DeadlockError& e) {
    throw DeadlockError(std::string(e.what()) + kRule);
  } catch (const TimeoutError& e) {
    throw TimeoutError(std::string(e.what()) + kRule);
  }
}

void FullyShardedModel::Impl::gather(int u, bool wait) {
  Unit& unit = units[u];
  if (unit.residence != Residence::released) return;
  if (!unit.gathering.valid()) {
    allocate_storage(unit.full);
    if (n == 1) {
      ::torch::NoGradGuard no_grad;
      unit.full.copy_(compute_shard(unit));
      unit.residence = Residence::gathered;
      return;
    }
    unit.gathering = lt::allgather_into_async(compute_shard(unit), unit.full,
                                              fmt::format("{}.ag.{}", options->name, unit.tag),
                                              options->group.id());
  }
  if (!wait) return;
  wait_unit_collective(unit.gathering);
  unit.gathering = {};
  unit.residence = Residence::gathered;
}

void FullyShardedModel::Impl::refresh(int u) {
  Unit& unit = units[u];
  const Residence was = unit.residence;
  LOCKSTEP_DCHECK(was != Residence::released, "unit {} refreshed while released", u);
  unit.residence = Residence::released;  // for gather(); full keeps its memory (allocate_storage)
  gather(u, true);
  unit.residence = was;
}

void FullyShardedModel::Impl::release(int u) {
  Unit& unit = units[u];
  if (unit.residence != Residence::gathered) return;
  LOCKSTEP_DCHECK(!unit.gathering.valid(), "unit {} released with its all-gather in flight", u);
  release_storage(unit.full);
  unit.residence = Residence::released;
}

// The next unit (direction +1) or previous one (-1) that has parameters; -1 if none.
int FullyShardedModel::Impl::next_with_params(int u, int direction) const {
  for (int v = u + direction; v >= 0 && v < static_cast<int>(units.size()); v += direction)
    if (!units[v].params.empty()) return v;
  return -1;
}

int FullyShardedModel::Impl::backward_prefetch(int u) const {
  if (!modules) return next_with_params(u, -1);
  return order_frozen ? previous_backward[u] : -1;
}

// Per unit: the one called before its last call (backward meets that call
// first).
void FullyShardedModel::Impl::freeze_order() {
  if (order_frozen) return;
  order_frozen = true;
  previous_backward.assign(units.size(), -1);
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i - 1] != order[i]) previous_backward[order[i]] = order[i - 1];
}

// The unit of the first later call in `order` that is another unit (a unit
// called twice in a row: the one after its calls); none after the last
// call, so a forward leaves nothing to gather behind it. A call that is not
// the one `position` expects (a forward that left the recorded order) is
// taken as u's first call.
int FullyShardedModel::Impl::next_call(int u) {
  if (!order_frozen) return -1;
  if (position >= order.size() || order[position] != u)
    position = static_cast<size_t>(std::find(order.begin(), order.end(), u) - order.begin());
  if (position >= order.size()) {  // not called in the recorded forward
    position = 0;
    return -1;
  }
  int next = -1;
  for (size_t j = position + 1; next < 0 && j < order.size(); ++j)
    if (order[j] != u) next = order[j];
  position = position + 1 < order.size() ? position + 1 : 0;  // the next forward starts over
  return next;
}

// A recomputation during backward (activation checkpointing) prefetches
// nothing: the backward gathers what it needs in its own order.
void FullyShardedModel::Impl::enter(int u) {
  if (units[u].params.empty()) return;
  if (!order_frozen) order.push_back(u);
  gather(u, true);
  const int next = pass_open ? -1 : next_call(u);
  if (options->prefetch && next >= 0 && units[next].residence == Residence::released) {
    gather(next, false);
    prefetching = next;
  }
}

// The prefetch is waited for here, not at the next unit's enter(): the
// model's own code between units is short, and an all-gather still in
// flight after the forward returned (a unit called last, an evaluation that
// stops early) would be cut off by lt::shutdown() and kept stale by step().
Tensor FullyShardedModel::Impl::leave(int u, Tensor out) {
  if (units[u].params.empty()) return out;
  release(u);
  if (prefetching >= 0) {
    const int next = prefetching;
    prefetching = -1;
    gather(next, true);
  }
  if (::torch::GradMode::is_enabled() && out.requires_grad())
    out = UnitBoundary::apply(out, reinterpret_cast<int64_t>(this), static_cast<int64_t>(u));
  return out;
}

void FullyShardedModel::Impl::begin_backward(int u) {
  open_pass();
  Unit& unit = units[u];
  if (unit.sent)
    throw InvalidArgument(fmt::format(
        "FullyShardedModel: unit {} reached again in one backward pass after its gradient was "
        "reduced",
        unit.label));
  if (modules) freeze_order();
  gather(u, true);
  const int previous = backward_prefetch(u);
  // A unit already reduced (module path: an order not strictly reversed)
  // must not be gathered now: it would keep this step's values past step().
  if (options->prefetch && previous >= 0 && !units[previous].sent) gather(previous, false);
  if (!unit.grad_full.defined()) {
    unit.grad_full = ::torch::zeros({unit.layout.shard * n}, unit.full.options());
    for (const ShardPlacement& place : unit.layout.placements)
      if (place.param_offset == 0)
        params[place.param].mutable_grad() =
            unit.grad_full.narrow(0, place.flat_offset, params[place.param].numel())
                .view(params[place.param].sizes());
  }
}

void FullyShardedModel::Impl::bind_views(int u) {
  Unit& unit = units[u];
  ::torch::NoGradGuard no_grad;
  allocate_storage(unit.full);  // views are checked against the storage's size
  for (const ShardPlacement& place : unit.layout.placements)
    if (place.param_offset == 0) {
      Tensor& p = params[place.param];
      p.set_data(unit.full.narrow(0, place.flat_offset, p.numel()).view(p.sizes()));
    }
}

::torch::nn::Sequential& FullyShardedModel::module() {
  if (model_.is_empty())
    throw InvalidArgument(
        "FullyShardedModel::module: built over a module, not a Sequential; "
        "use wrapped()");
  return model_;
}

Tensor FullyShardedModel::forward(Tensor x) {
  if (model_.is_empty())
    throw InvalidArgument(
        "FullyShardedModel::forward: built over a module; call the module's "
        "own forward (its FullyShardedUnit submodules gather themselves)");
  Impl& m = *impl_;
  const bool grad = ::torch::GradMode::is_enabled();
  x = m.to_compute(x);
  for (int u = 0; u < static_cast<int>(m.units.size()); ++u) {
    const bool has_params = !m.units[u].params.empty();
    if (has_params) {
      m.gather(u, true);
      const int next = m.next_with_params(u, +1);
      if (options_.prefetch && next >= 0) m.gather(next, false);
    }
    for (int layer = m.units[u].first_layer; layer < m.units[u].end_layer; ++layer) {
      try {
        x = (model_->begin() + layer)->forward(x);
      } catch (const c10::Error&) {
        m.explain_layer_error(fmt::format("layer {} (in unit {})", layer, m.units[u].label));
      }
    }
    if (!has_params) continue;
    m.release(u);
    if (grad && x.requires_grad())
      x = UnitBoundary::apply(x, reinterpret_cast<int64_t>(&m), static_cast<int64_t>(u));
  }
  return m.to_master(x);
}

}  // namespace lockstep::parallel
