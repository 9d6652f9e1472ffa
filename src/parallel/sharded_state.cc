// ShardedOptimizer <-> whole-model optimizer state, for checkpoints that do
// not depend on the world size (lockstep/parallel/checkpoint.h); the
// conversion itself is parallel/piece_state.h's.
#include "lockstep/parallel/optimizer_state.h"
#include "parallel/piece_state.h"
#include "parallel/sharded_optimizer_impl.h"

namespace lockstep::parallel {

using ::torch::Tensor;

namespace {

std::vector<detail::PieceRef> piece_refs(const ShardedOptimizer::Impl& m) {
  std::vector<detail::PieceRef> refs;
  for (const auto& piece : m.pieces)
    refs.push_back({piece.place.param, piece.place.param_offset, piece.place.length, piece.tensor});
  return refs;
}

}  // namespace

ShardedOptimizer::FullState ShardedOptimizer::gather_full_state() {
  Impl& m = *impl_;
  m.land_all();  // a checkpoint saves the module's parameters too
  return detail::gather_piece_states(*optimizer_, piece_refs(m), m.params, !m.element,
                                     options_.name + ".state", options_.group.id(), m.n);
}

void ShardedOptimizer::scatter_full_state(const FullState& full) {
  Impl& m = *impl_;
  m.land_all();
  detail::scatter_piece_states(*optimizer_, piece_refs(m), m.params, !m.element, full,
                               "ShardedOptimizer");
}

void ShardedOptimizer::rebind() {
  impl_->land_all();
  optimizer_->state().clear();
  impl_->bind_pieces(*optimizer_);
}

ShardedOptimizer::FullState ShardedOptimizer::with_full_view(FullState full,
                                                             const std::function<void()>& body) {
  Impl& m = *impl_;
  m.land_all();
  auto& groups = optimizer_->param_groups();
  auto& state = optimizer_->state();
  auto stashed = std::move(state);
  state.clear();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].params() = m.full_groups[g];
  for (size_t p = 0; p < full.size() && p < m.params.size(); ++p)
    if (full[p]) state[state_key(m.params[p])] = std::move(full[p]);
  FullState out(m.params.size());
  auto restore = [&] {
    for (size_t p = 0; p < m.params.size(); ++p) {
      auto it = state.find(state_key(m.params[p]));
      if (it != state.end()) out[p] = std::move(it->second);
    }
    state = std::move(stashed);
    for (size_t g = 0; g < groups.size(); ++g) groups[g].params() = m.piece_groups[g];
  };
  try {
    body();
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return out;
}

}  // namespace lockstep::parallel
