// What FullyShardedModel and ShardedOptimizer hold on this rank, as the
// routed save and load of checkpoint directories see it (Note [Routed
// checkpoint saves] in checkpoint_dir_routed_save.cc).
#include <fmt/format.h>

#include <numeric>

#include "lockstep/base/error.h"
#include "parallel/checkpoint_dir_impl.h"
#include "parallel/fully_sharded_impl.h"
#include "parallel/sharded_optimizer_impl.h"

namespace lockstep::parallel::detail::ckdir {

std::optional<ShardedView> Access::view(FullyShardedModel& fsdp,
                                        const ::torch::optim::Optimizer& optimizer) {
  const FullyShardedModel::Impl& m = *fsdp.impl_;
  const auto& options = fsdp.options_;
  if (!routes_everywhere(options.group, options.replicate ? options.replicate->size() : 1))
    return std::nullopt;
  if (optimizer.param_groups().size() != 1 ||
      optimizer.param_groups()[0].params().size() != m.pieces.size())
    throw InvalidArgument(fmt::format(
        "FullyShardedModel: checkpoints need the optimizer built on fsdp.parameters() in one "
        "param group (it has {} groups)",
        optimizer.param_groups().size()));
  ShardedView v;
  v.module = fsdp.root_.get();
  v.params = m.params;
  v.shapes = m.shapes;
  v.dtype = m.dtype;
  v.whole_tensors = !m.element;
  v.pieces = m.pieces;
  v.groups.emplace_back(m.params.size());
  std::iota(v.groups[0].begin(), v.groups[0].end(), 0);
  v.group = options.group;
  v.name = options.name;
  return v;
}

std::optional<ShardedView> Access::view(const ::torch::nn::Module& module,
                                        ShardedOptimizer& optimizer) {
  ShardedOptimizer::Impl& m = *optimizer.impl_;
  if (!routes_everywhere(optimizer.options_.group, 1)) return std::nullopt;
  m.land_all();  // the parameters' values, and the pieces' views of them, are final
  ShardedView v;
  v.module = &module;
  v.params = m.params;
  for (const auto& p : m.params) v.shapes.push_back(p.sizes().vec());
  v.dtype = m.dtype;
  v.whole_params = true;
  v.whole_tensors = !m.element;
  for (const auto& piece : m.pieces)
    v.pieces.push_back(
        {piece.place.param, piece.place.param_offset, piece.place.length, piece.tensor});
  size_t next = 0;
  for (size_t size : m.group_sizes) {
    v.groups.emplace_back(m.group_params.begin() + next, m.group_params.begin() + next + size);
    next += size;
  }
  v.group = optimizer.options_.group;
  v.name = optimizer.options_.name;
  return v;
}

void Access::before_load(FullyShardedModel& fsdp) {
  FullyShardedModel::Impl& m = *fsdp.impl_;
  m.land_reduce();
  for (int u = 0; u < static_cast<int>(m.units.size()); ++u)
    if (m.units[u].gathering.valid()) m.gather(u, /*wait=*/true);
}

void Access::after_load(FullyShardedModel& fsdp) {
  FullyShardedModel::Impl& m = *fsdp.impl_;
  ::torch::NoGradGuard no_grad;
  for (int u = 0; u < static_cast<int>(m.units.size()); ++u) {
    auto& unit = m.units[u];
    if (unit.params.empty()) continue;
    if (unit.device_shard.defined()) unit.device_shard.copy_(unit.shard);
    // A released unit gathers the new values when it next runs; the root
    // unit and kept ones take them now.
    if (unit.residence != FullyShardedModel::Impl::Residence::released) m.refresh(u);
  }
}

}  // namespace lockstep::parallel::detail::ckdir
