// FullyShardedModel <-> the whole model and optimizer state that
// world-size-independent checkpoints hold (lockstep/parallel/checkpoint.h):
// the same file as lockstep::torch::save_checkpoint of a one-process model
// and an optimizer built on its parameters() in one group.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "lockstep/base/error.h"
#include "lockstep/parallel/optimizer_state.h"
#include "parallel/fully_sharded_impl.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;

namespace {

void require_one_group(const ::torch::optim::Optimizer& optimizer, size_t pieces) {
  if (optimizer.param_groups().size() != 1 || optimizer.param_groups()[0].params().size() != pieces)
    throw InvalidArgument(fmt::format(
        "FullyShardedModel: checkpoints need the optimizer built on fsdp.parameters() in one "
        "param group (it has {} groups)",
        optimizer.param_groups().size()));
}

}  // namespace

// Mixed precision: the parameters as views of whole master-dtype copies
// (what a checkpoint holds), gathered from the master segments.
static void master_views(FullyShardedModel::Impl& m) {
  ::torch::NoGradGuard no_grad;
  for (int u = 0; u < static_cast<int>(m.units.size()); ++u) {
    auto& unit = m.units[u];
    if (unit.params.empty()) continue;
    const Tensor& mine = unit.device_shard.defined() ? unit.device_shard : unit.shard;
    Tensor whole = ::torch::empty({unit.layout.shard * m.n}, mine.options());
    if (m.n == 1)
      whole.copy_(mine);
    else
      lt::allgather_into_async(mine, whole, fmt::format("{}.master.{}", m.options->name, u),
                               m.options->group.id())
          .wait();
    for (const ShardPlacement& place : unit.layout.placements)
      if (place.param_offset == 0) {
        Tensor& p = m.params[place.param];
        p.set_data(whole.narrow(0, place.flat_offset, p.numel()).view(p.sizes()));
      }
  }
}

// The root unit is whole on every rank: the parameters' values (as body
// left them, e.g. loaded) are copied into its buffer, no collective needed.
static void keep_root_values(FullyShardedModel::Impl& m, int u) {
  auto& unit = m.units[u];
  ::torch::NoGradGuard no_grad;
  for (const ShardPlacement& place : unit.layout.placements) {
    if (place.param_offset != 0) continue;  // a parameter's later segments
    Tensor& p = m.params[place.param];
    Tensor slot = unit.full.narrow(0, place.flat_offset, p.numel());
    if (p.data_ptr() != slot.data_ptr()) slot.copy_(p.detach().reshape({-1}));
  }
  m.bind_views(u);
  unit.residence = FullyShardedModel::Impl::Residence::kept;
}

// The parameters back as views of their units' (released) buffers; a
// dtype change gave them new gradient accumulators, which need the hooks.
static void leave_full_view(FullyShardedModel::Impl& m) {
  for (int u = 0; u < static_cast<int>(m.units.size()); ++u) {
    auto& unit = m.units[u];
    if (unit.params.empty()) continue;
    if (unit.root) {  // stays gathered: the parameters' values (a load's) into full
      keep_root_values(m, u);
      continue;
    }
    m.bind_views(u);  // the values in full are stale until the next gather
    unit.residence = FullyShardedModel::Impl::Residence::gathered;
    m.release(u);
  }
  if (m.compute != m.dtype) m.register_hooks();
}

// The parameters may hold other storage than their unit's (Module::load
// replaced it): their values become this rank's segments and they are views
// of the unit again.
static void take_parameters(FullyShardedModel::Impl& m) {
  ::torch::NoGradGuard no_grad;
  for (size_t p = 0; p < m.params.size(); ++p)
    if (!m.params[p].sizes().equals(m.shapes[p]))
      throw Error(fmt::format(
          "FullyShardedModel: the checkpoint's {} has shape {} but the model's "
          "has {}; it was written for another model",
          m.names[p], fmt::join(m.params[p].sizes(), "x"), fmt::join(m.shapes[p], "x")));
  for (int u = 0; u < static_cast<int>(m.units.size()); ++u) {
    auto& unit = m.units[u];
    if (unit.params.empty()) continue;
    for (const ShardPlacement& place : unit.layout.placements)
      if (unit.layout.owner(place) == m.me)
        unit.shard.narrow(0, place.flat_offset - m.me * unit.layout.shard, place.length)
            .copy_(m.params[place.param].detach().reshape({-1}).narrow(0, place.param_offset,
                                                                       place.length));
    if (unit.device_shard.defined()) unit.device_shard.copy_(unit.shard);
  }
  leave_full_view(m);
}

void FullyShardedModel::with_full_view(::torch::optim::Optimizer& optimizer, bool keep_changes,
                                       const std::function<void()>& body) {
  Impl& m = *impl_;
  require_one_group(optimizer, m.pieces.size());
  auto full = detail::gather_piece_states(optimizer, m.pieces, m.params, !m.element,
                                          options_.name + ".state", options_.group.id(), m.n);
  if (m.compute != m.dtype)
    master_views(m);
  else
    gather_full();
  auto& group = optimizer.param_groups()[0];
  auto& state = optimizer.state();
  std::vector<Tensor> shards = group.params();
  auto stashed = std::move(state);
  state.clear();
  group.params() = m.params;
  for (size_t p = 0; p < full.size(); ++p)
    if (full[p]) state[state_key(m.params[p])] = std::move(full[p]);
  auto restore = [&] {
    detail::FullState changed(m.params.size());
    for (size_t p = 0; p < m.params.size(); ++p) {
      auto it = state.find(state_key(m.params[p]));
      if (it != state.end()) changed[p] = std::move(it->second);
    }
    state = std::move(stashed);
    group.params() = shards;
    return changed;
  };
  try {
    body();
  } catch (...) {
    restore();
    leave_full_view(m);
    throw;
  }
  auto changed = restore();
  if (!keep_changes) {
    leave_full_view(m);
    return;
  }
  try {
    take_parameters(m);
  } catch (...) {
    leave_full_view(m);
    throw;
  }
  state.clear();
  detail::scatter_piece_states(optimizer, m.pieces, m.params, !m.element, changed,
                               "FullyShardedModel");
}

void save_checkpoint(const std::string& path, FullyShardedModel& fsdp,
                     ::torch::optim::Optimizer& optimizer, const lt::TrainingProgress& progress) {
  fsdp.with_full_view(optimizer, /*keep_changes=*/false,
                      [&] { lt::save_checkpoint(path, fsdp.wrapped(), optimizer, progress); });
}

bool load_checkpoint(const std::string& path, FullyShardedModel& fsdp,
                     ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  bool found = false;
  fsdp.with_full_view(optimizer, /*keep_changes=*/true, [&] {
    found = lt::load_checkpoint(path, fsdp.wrapped(), optimizer, progress);
  });
  return found;
}

}  // namespace lockstep::parallel
