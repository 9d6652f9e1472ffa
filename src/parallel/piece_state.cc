#include "parallel/piece_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/objects.h"

namespace lockstep::parallel::detail {

namespace lt = lockstep::torch;
using ::torch::Tensor;

namespace {

struct PieceState {
  int64_t offset = 0, length = 0;
  StateValues values;
};

void append_i64(std::string& out, int64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

int64_t read_i64(const std::string& in, size_t& pos) {
  if (pos + 8 > in.size()) throw Error("sharded optimizer state: truncated state message");
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
  // Paired with the (param, offset, length) records gather_piece_states
  // writes: the ranks' pieces tile the parameter, no gap and no overlap.
  for (size_t k = 1; k < pieces.size(); ++k)
    LOCKSTEP_DCHECK_EQ(pieces[k].offset, pieces[k - 1].offset + pieces[k - 1].length,
                       "sharded optimizer state: a piece of {} elements does not follow its "
                       "neighbour",
                       pieces[k].length);
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
        throw Error(
            fmt::format("sharded optimizer state: '{}' differs in kind between shards", key));
      parts.push_back(piece.values[k].second.toTensor());
    }
    Tensor whole = ::torch::cat(parts);
    if (whole.numel() != param.numel())
      throw Error(fmt::format("sharded optimizer state: shards of '{}' hold {} of {} elements", key,
                              whole.numel(), param.numel()));
    merged.emplace_back(key, whole.view(param.sizes()));
  }
  return merged;
}

// This rank's pieces with state: (param, offset, length, bytes) records.
std::string encode_pieces(const ::torch::optim::Optimizer& optimizer,
                          const std::vector<PieceRef>& pieces, const ParamState** prototype) {
  std::string blob;
  const auto& state = optimizer.state();
  for (const auto& piece : pieces) {
    auto it = state.find(state_key(piece.tensor));
    if (it == state.end()) continue;
    *prototype = it->second.get();
    const std::string bytes = serialize_state(*it->second);
    for (int64_t v : {static_cast<int64_t>(piece.param), piece.offset, piece.length,
                      static_cast<int64_t>(bytes.size())})
      append_i64(blob, v);
    blob += bytes;
  }
  return blob;
}

}  // namespace

FullState gather_piece_states(const ::torch::optim::Optimizer& optimizer,
                              const std::vector<PieceRef>& pieces,
                              const std::vector<Tensor>& params, bool whole_tensors,
                              const std::string& name, int process_set, int ranks) {
  for (const auto& piece : pieces)
    LOCKSTEP_DCHECK(piece.offset >= 0 && piece.offset + piece.length <= params[piece.param].numel(),
                    "sharded optimizer state: piece [{}, +{}) past parameter {}", piece.offset,
                    piece.length, piece.param);
  const ParamState* prototype = nullptr;
  const std::string blob = encode_pieces(optimizer, pieces, &prototype);
  std::vector<std::string> all =
      ranks > 1 ? lt::allgather_bytes(blob, name, process_set) : std::vector<std::string>{blob};
  std::map<int, std::vector<PieceState>> by_param;
  for (const std::string& from : all)
    for (size_t pos = 0; pos < from.size();) {
      const int param = static_cast<int>(read_i64(from, pos));
      PieceState piece;
      piece.offset = read_i64(from, pos);
      piece.length = read_i64(from, pos);
      const auto size = static_cast<size_t>(read_i64(from, pos));
      if (param < 0 || param >= static_cast<int>(params.size()) || pos + size > from.size())
        throw Error("sharded optimizer state: corrupt state message");
      piece.values = parse_state(from.substr(pos, size));
      pos += size;
      by_param[param].push_back(std::move(piece));
    }
  FullState full(params.size());
  if (!prototype) return full;  // no state here to type the others (only rank 0 writes)
  for (auto& [param, parts] : by_param)
    full[param] = state_from_values(*prototype,
                                    merge_pieces(std::move(parts), params[param], !whole_tensors));
  return full;
}

void scatter_piece_states(::torch::optim::Optimizer& optimizer, const std::vector<PieceRef>& pieces,
                          const std::vector<Tensor>& params, bool whole_tensors,
                          const FullState& full, const std::string& who) {
  if (full.size() != params.size())
    throw InvalidArgument(
        fmt::format("{}: a full state for {} parameters, not {}", who, full.size(), params.size()));
  auto& state = optimizer.state();
  for (const auto& piece : pieces) {
    const auto key = state_key(piece.tensor);
    const ParamState* whole = full[piece.param].get();
    if (!whole) {
      state.erase(key);
      continue;
    }
    StateValues values = state_values(*whole);
    if (!whole_tensors)
      for (auto& [value_name, value] : values)
        if (value.isTensor() && value.toTensor().defined() &&
            value.toTensor().sizes().equals(params[piece.param].sizes()))
          value = value.toTensor().reshape({-1}).narrow(0, piece.offset, piece.length).clone();
    state[key] = state_from_values(*whole, values);
  }
}

}  // namespace lockstep::parallel::detail
