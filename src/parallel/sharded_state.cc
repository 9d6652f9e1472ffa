// ShardedOptimizer <-> whole-model optimizer state, for checkpoints that do
// not depend on the world size (lockstep/parallel/checkpoint.h).
//
// A piece's state tensors that are elementwise (1-D, one value per element of
// the piece) are concatenated in parameter order and reshaped to the
// parameter; everything else (step counts, scalars) is taken from the first
// piece. Tensor granularity pieces are whole parameters already.
#include <fmt/format.h>

#include <cstring>
#include <map>

#include "lockstep/base/error.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/objects.h"
#include "parallel/sharded_optimizer_impl.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;
using State = ::torch::optim::OptimizerParamState;

namespace {

struct PieceState {
  int64_t offset = 0, length = 0;
  StateValues values;
};

void append_i64(std::string& out, int64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

int64_t read_i64(const std::string& in, size_t& pos) {
  if (pos + 8 > in.size()) throw Error("ShardedOptimizer: truncated state message");
  int64_t v;
  std::memcpy(&v, in.data() + pos, 8);
  pos += 8;
  return v;
}

bool is_elementwise_value(const c10::IValue& v, int64_t length) {
  return v.isTensor() && v.toTensor().defined() && v.toTensor().dim() == 1 &&
         v.toTensor().size(0) == length;
}

StateValues merge_pieces(std::vector<PieceState> pieces, const Tensor& param, bool element) {
  std::sort(pieces.begin(), pieces.end(),
            [](const PieceState& a, const PieceState& b) { return a.offset < b.offset; });
  if (!element) return pieces.front().values;
  StateValues merged;
  for (size_t k = 0; k < pieces.front().values.size(); ++k) {
    const auto& [key, first] = pieces.front().values[k];
    if (!is_elementwise_value(first, pieces.front().length)) {
      merged.emplace_back(key, first);
      continue;
    }
    std::vector<Tensor> parts;
    for (const auto& piece : pieces) {
      if (k >= piece.values.size() || piece.values[k].first != key ||
          !is_elementwise_value(piece.values[k].second, piece.length))
        throw Error(fmt::format("ShardedOptimizer: state '{}' differs in kind between shards", key));
      parts.push_back(piece.values[k].second.toTensor());
    }
    Tensor whole = ::torch::cat(parts);
    if (whole.numel() != param.numel())
      throw Error(fmt::format("ShardedOptimizer: shards of state '{}' hold {} of {} elements", key,
                              whole.numel(), param.numel()));
    merged.emplace_back(key, whole.view(param.sizes()));
  }
  return merged;
}

}  // namespace

ShardedOptimizer::FullState ShardedOptimizer::gather_full_state() {
  Impl& m = *impl_;
  m.land_all();  // a checkpoint saves the module's parameters too
  auto& state = optimizer_->state();
  std::string blob;
  const State* prototype = nullptr;
  for (const auto& piece : m.pieces) {
    auto it = state.find(state_key(piece.tensor));
    if (it == state.end()) continue;
    prototype = it->second.get();
    const std::string bytes = serialize_state(*it->second);
    for (int64_t v : {static_cast<int64_t>(piece.place.param), piece.place.param_offset,
                      piece.place.length, static_cast<int64_t>(bytes.size())})
      append_i64(blob, v);
    blob += bytes;
  }
  std::vector<std::string> all = m.n > 1 ? lt::allgather_bytes(blob, options_.name + ".state",
                                                               options_.group.id())
                                         : std::vector<std::string>{blob};
  std::map<int, std::vector<PieceState>> by_param;
  for (const std::string& from : all)
    for (size_t pos = 0; pos < from.size();) {
      const int param = static_cast<int>(read_i64(from, pos));
      PieceState piece;
      piece.offset = read_i64(from, pos);
      piece.length = read_i64(from, pos);
      const auto size = static_cast<size_t>(read_i64(from, pos));
      if (param < 0 || param >= static_cast<int>(m.params.size()) || pos + size > from.size())
        throw Error("ShardedOptimizer: corrupt state message");
      piece.values = parse_state(from.substr(pos, size));
      pos += size;
      by_param[param].push_back(std::move(piece));
    }
  FullState full(m.params.size());
  if (!prototype) return full;  // no state here to type the others (only rank 0 writes)
  for (auto& [param, pieces] : by_param)
    full[param] = state_from_values(*prototype, merge_pieces(std::move(pieces), m.params[param],
                                                             m.element));
  return full;
}

void ShardedOptimizer::scatter_full_state(const FullState& full) {
  Impl& m = *impl_;
  m.land_all();
  if (full.size() != m.params.size())
    throw InvalidArgument(fmt::format("ShardedOptimizer: a full state for {} parameters, not {}",
                                      full.size(), m.params.size()));
  auto& state = optimizer_->state();
  for (const auto& piece : m.pieces) {
    const auto key = state_key(piece.tensor);
    const State* whole = full[piece.place.param].get();
    if (!whole) {
      state.erase(key);
      continue;
    }
    StateValues values = state_values(*whole);
    if (m.element)
      for (auto& [name, value] : values)
        if (value.isTensor() && value.toTensor().defined() &&
            value.toTensor().sizes().equals(m.params[piece.place.param].sizes()))
          value = value.toTensor().reshape({-1}).narrow(0, piece.place.param_offset,
                                                        piece.place.length).clone();
    state[key] = state_from_values(*whole, values);
  }
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
