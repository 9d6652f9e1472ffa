// What each rank holds of a tensor- or pipeline-parallel model, described
// to every rank, and the whole model's parameter list built from it (Note
// [Whole-model view] in model_checkpoint.cc).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/objects.h"
#include "parallel/checkpoint_dir_impl.h"
#include "parallel/named_tensors.h"

namespace lockstep::parallel::detail {

namespace lt = lockstep::torch;
using ::torch::Tensor;

namespace {

// One line per value of a parameter's optimizer state: its key, kind,
// dtype, whether it is elementwise (the shape of this rank's slice) and its
// shape. Bytes, not tensors: what a routed save needs to plan the entries.
std::string describe_slots(const ::torch::optim::OptimizerParamState& state, const Tensor& param) {
  std::ostringstream out;
  for (const auto& [key, value] : state_values(state)) {
    if (value.isTensor() && !value.toTensor().defined()) continue;
    auto [t, kind] = ckdir::state_value_tensor(value, key);
    ckdir::write_slot(out, {.key = key,
                            .kind = kind,
                            .dtype = static_cast<int>(t.scalar_type()),
                            .elementwise = kind == "tensor" && t.sizes().equals(param.sizes()),
                            .shape = t.sizes().vec()});
    out << '\n';
  }
  return out.str();
}

int group_of(const Tensor& param, const ::torch::optim::Optimizer& optimizer) {
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g)
    for (const Tensor& p : groups[g].params())
      if (p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) return static_cast<int>(g);
  return -1;
}

Piece describe_param(const ModelParts& parts, size_t position,
                     const ::torch::optim::Optimizer& optimizer, Describe what) {
  const auto& [name, param] = parts.parameters[position];
  Piece piece{.name = name,
              .full_shape = param.sizes().vec(),
              .stage = parts.stage,
              .position = static_cast<int64_t>(position),
              .rank = lt::rank(),
              .dtype = static_cast<int64_t>(param.scalar_type())};
  if (auto it = parts.shards.find(name); it != parts.shards.end()) {
    const ShardSpec& spec = it->second;
    auto [begin, length] = shard_range(spec.full_size, spec.group.rank(), spec.group.size());
    piece.dim = spec.dim;
    piece.begin = begin;
    piece.length = length;
    piece.full_shape[spec.dim] = spec.full_size;
  }
  piece.group = group_of(param, optimizer);
  auto state = optimizer.state().find(state_key(param));
  const bool has_state = state != optimizer.state().end();
  if (what == Describe::kValues) {
    piece.value = param.detach();
    if (has_state) piece.state = serialize_state(*state->second);
  } else if (what == Describe::kSlots && has_state) {
    piece.slots = describe_slots(*state->second, param);
  }
  return piece;
}

void write_piece(::torch::serialize::OutputArchive& out, const std::string& prefix,
                 const Piece& p) {
  // Paired with whole_list's cover check where the pieces are read back: a
  // slice lies inside its parameter's shard dimension (length < 0: whole).
  LOCKSTEP_DCHECK(
      p.length < 0 || (p.dim >= 0 && p.dim < static_cast<int64_t>(p.full_shape.size()) &&
                       p.begin >= 0 && p.begin + p.length <= p.full_shape[p.dim]),
      "model checkpoint: slice [{}, +{}) of '{}' along dim {} outside its shape", p.begin, p.length,
      p.name, p.dim);
  out.write(prefix + "name", c10::IValue(p.name));
  out.write(prefix + "shape", c10::IValue(p.full_shape));
  out.write(prefix + "slice",
            c10::IValue(std::vector<int64_t>{p.dim, p.begin, p.length, p.group, p.stage, p.position,
                                             p.rank, p.dtype}));
  if (p.value.defined()) out.write(prefix + "value", p.value);
  if (!p.state.empty()) out.write(prefix + "state", c10::IValue(p.state));
  if (!p.slots.empty()) out.write(prefix + "slots", c10::IValue(p.slots));
}

Piece read_piece(::torch::serialize::InputArchive& in, const std::string& prefix) {
  Piece p;
  c10::IValue v;
  in.read(prefix + "name", v);
  p.name = v.toStringRef();
  in.read(prefix + "shape", v);
  p.full_shape = v.toIntVector();
  in.read(prefix + "slice", v);
  const auto s = v.toIntVector();
  if (s.size() != 8) throw Error("model checkpoint: corrupt parameter description");
  p.dim = s[0], p.begin = s[1], p.length = s[2], p.group = s[3];
  p.stage = s[4], p.position = s[5], p.rank = s[6], p.dtype = s[7];
  Tensor value;
  if (in.try_read(prefix + "value", value)) p.value = value;
  if (in.try_read(prefix + "state", v)) p.state = v.toStringRef();
  if (in.try_read(prefix + "slots", v)) p.slots = v.toStringRef();
  return p;
}

std::string encode(const Description& d) {
  ::torch::serialize::OutputArchive out;
  out.write("counts",
            c10::IValue(std::vector<int64_t>{d.groups, static_cast<int64_t>(d.params.size()),
                                             static_cast<int64_t>(d.buffers.size())}));
  for (size_t i = 0; i < d.params.size(); ++i)
    write_piece(out, fmt::format("p{}.", i), d.params[i]);
  for (size_t i = 0; i < d.buffers.size(); ++i)
    write_piece(out, fmt::format("b{}.", i), d.buffers[i]);
  return lt::archive_to_bytes(out);
}

Description decode(const std::string& bytes) {
  ::torch::serialize::InputArchive in;
  lt::archive_from_bytes(in, bytes);
  c10::IValue v;
  in.read("counts", v);
  const auto counts = v.toIntVector();
  Description d{.groups = counts.at(0)};
  for (int64_t i = 0; i < counts.at(1); ++i)
    d.params.push_back(read_piece(in, fmt::format("p{}.", i)));
  for (int64_t i = 0; i < counts.at(2); ++i)
    d.buffers.push_back(read_piece(in, fmt::format("b{}.", i)));
  return d;
}

}  // namespace

std::vector<Description> describe_all(const ModelParts& parts,
                                      const ::torch::optim::Optimizer& optimizer, Describe what) {
  Description mine{.groups = static_cast<int64_t>(optimizer.param_groups().size())};
  for (size_t i = 0; i < parts.parameters.size(); ++i)
    mine.params.push_back(describe_param(parts, i, optimizer, what));
  for (size_t i = 0; i < parts.buffers.size(); ++i) {
    const auto& [name, buffer] = parts.buffers[i];
    mine.buffers.push_back({.name = name,
                            .full_shape = buffer.sizes().vec(),
                            .stage = parts.stage,
                            .position = static_cast<int64_t>(i),
                            .rank = lt::rank(),
                            .dtype = static_cast<int64_t>(buffer.scalar_type())});
    if (what == Describe::kValues) mine.buffers.back().value = buffer.detach();
  }
  std::vector<Description> all;
  for (const std::string& bytes : lt::allgather_bytes(encode(mine), "model_checkpoint.describe"))
    all.push_back(decode(bytes));
  for (const Description& d : all)
    if (d.groups != mine.groups)
      throw Error(
          fmt::format("model checkpoint: optimizers have {} and {} param groups on "
                      "different ranks (build the same groups on every stage)",
                      mine.groups, d.groups));
  return all;
}

// Single-process order, consistent descriptions (Note [Whole-model view]).
std::vector<Whole> whole_list(const std::vector<Description>& all, bool buffers) {
  std::vector<const Piece*> pieces;
  for (const Description& d : all)
    for (const Piece& p : buffers ? d.buffers : d.params) pieces.push_back(&p);
  std::stable_sort(pieces.begin(), pieces.end(), [](const Piece* a, const Piece* b) {
    return std::tie(a->stage, a->position, a->rank) < std::tie(b->stage, b->position, b->rank);
  });
  std::vector<Whole> wholes;
  std::map<std::string, size_t> index;
  for (const Piece* p : pieces) {
    auto [it, fresh] = index.emplace(p->name, wholes.size());
    if (fresh)
      wholes.push_back({.name = p->name,
                        .shape = p->full_shape,
                        .group = p->group,
                        .dim = p->dim,
                        .dtype = p->dtype});
    Whole& w = wholes[it->second];
    if (w.shape != p->full_shape || w.group != p->group || w.dim != p->dim)
      throw Error(
          fmt::format("model checkpoint: '{}' is {} in param group {} on one rank and {} in "
                      "group {} on rank {} (build the same model on every rank)",
                      w.name, c10::str(c10::IntArrayRef(w.shape)), w.group,
                      c10::str(c10::IntArrayRef(p->full_shape)), p->group, p->rank));
    const bool seen = std::any_of(w.slices.begin(), w.slices.end(),
                                  [&](const Piece* s) { return s->begin == p->begin; });
    if (!seen) w.slices.push_back(p);
  }
  for (Whole& w : wholes) {
    std::sort(w.slices.begin(), w.slices.end(),
              [](const Piece* a, const Piece* b) { return a->begin < b->begin; });
    int64_t next = 0;
    for (const Piece* s : w.slices)
      if (s->length >= 0 && s->begin == next) next += s->length;
    const bool whole = w.slices.front()->length < 0;
    if (!whole && next != w.shape[w.dim])
      throw Error(
          fmt::format("model checkpoint: the slices of '{}' cover {} of its {} entries "
                      "along dim {}",
                      w.name, next, w.shape[w.dim], w.dim));
  }
  return wholes;
}

std::vector<ckdir::SlotInfo> ckdir::parse_slots(const std::string& text) {
  std::vector<SlotInfo> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    out.push_back(read_slot(fields));
  }
  return out;
}

}  // namespace lockstep::parallel::detail
