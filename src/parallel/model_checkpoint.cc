// Checkpoints of tensor- and pipeline-parallel models that do not depend on
// the layout (lockstep/parallel/checkpoint.h).
//
// Note [Whole-model view]
// Every rank describes what it holds (names, full shapes, its slice, its
// param group; when saving also the values and the optimizer state) and the
// descriptions are all-gathered. From them each rank knows the whole model's
// parameter list in single-process order: by (stage, position), first
// occurrence of a name. The optimizer is then shown that whole list for a
// moment (its param groups' params and its state swapped), and
// lockstep::torch::save_checkpoint / load_checkpoint run on a module made of
// the whole tensors under their dotted names. So the file is the one a
// single process writes, and LibTorch's own (positional) optimizer
// serialisation maps the state to the right parameters. A state tensor with
// the shape of its parameter's slice is elementwise: it is concatenated
// (saving) or sliced (loading) along the shard dimension like the parameter;
// any other value (step counts) is taken from the first slice.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/parallel/checkpoint.h"
#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/objects.h"
#include "parallel/named_tensors.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;
using State = ::torch::optim::OptimizerParamState;

namespace {

// One parameter or buffer as one rank holds it.
struct Piece {
  std::string name;
  std::vector<int64_t> full_shape;
  int64_t dim = 0, begin = 0, length = -1;  // length -1: the whole tensor
  int64_t group = -1;                       // optimizer param group; -1: none
  int64_t stage = 0, position = 0, rank = 0;
  int64_t dtype = static_cast<int64_t>(::torch::kFloat);  // c10::ScalarType
  Tensor value{};       // saving only
  std::string state{};  // saving only: serialize_state(), empty when none
};

struct Description {
  int64_t groups = 0;
  std::vector<Piece> params{}, buffers{};
};

int group_of(const Tensor& param, const ::torch::optim::Optimizer& optimizer) {
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g)
    for (const Tensor& p : groups[g].params())
      if (p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) return static_cast<int>(g);
  return -1;
}

Piece describe_param(const ModelParts& parts, size_t position,
                     const ::torch::optim::Optimizer& optimizer, bool with_values) {
  const auto& [name, param] = parts.parameters[position];
  Piece piece{.name = name, .full_shape = param.sizes().vec(), .stage = parts.stage,
              .position = static_cast<int64_t>(position), .rank = lt::rank(),
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
  if (with_values) {
    piece.value = param.detach();
    auto state = optimizer.state().find(state_key(param));
    if (state != optimizer.state().end()) piece.state = serialize_state(*state->second);
  }
  return piece;
}

void write_piece(::torch::serialize::OutputArchive& out, const std::string& prefix,
                 const Piece& p) {
  // Paired with whole_list's cover check where the pieces are read back: a
  // slice lies inside its parameter's shard dimension (length < 0: whole).
  LOCKSTEP_DCHECK(p.length < 0 || (p.dim >= 0 && p.dim < static_cast<int64_t>(p.full_shape.size()) &&
                                   p.begin >= 0 && p.begin + p.length <= p.full_shape[p.dim]),
                  "model checkpoint: slice [{}, +{}) of '{}' along dim {} outside its shape",
                  p.begin, p.length, p.name, p.dim);
  out.write(prefix + "name", c10::IValue(p.name));
  out.write(prefix + "shape", c10::IValue(p.full_shape));
  out.write(prefix + "slice", c10::IValue(std::vector<int64_t>{p.dim, p.begin, p.length, p.group,
                                                               p.stage, p.position, p.rank,
                                                               p.dtype}));
  if (p.value.defined()) out.write(prefix + "value", p.value);
  if (!p.state.empty()) out.write(prefix + "state", c10::IValue(p.state));
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
  return p;
}

std::string encode(const Description& d) {
  ::torch::serialize::OutputArchive out;
  out.write("counts", c10::IValue(std::vector<int64_t>{d.groups,
                                                       static_cast<int64_t>(d.params.size()),
                                                       static_cast<int64_t>(d.buffers.size())}));
  for (size_t i = 0; i < d.params.size(); ++i) write_piece(out, fmt::format("p{}.", i), d.params[i]);
  for (size_t i = 0; i < d.buffers.size(); ++i) write_piece(out, fmt::format("b{}.", i), d.buffers[i]);
  return lt::archive_to_bytes(out);
}

Description decode(const std::string& bytes) {
  ::torch::serialize::InputArchive in;
  lt::archive_from_bytes(in, bytes);
  c10::IValue v;
  in.read("counts", v);
  const auto counts = v.toIntVector();
  Description d{.groups = counts.at(0)};
  for (int64_t i = 0; i < counts.at(1); ++i) d.params.push_back(read_piece(in, fmt::format("p{}.", i)));
  for (int64_t i = 0; i < counts.at(2); ++i) d.buffers.push_back(read_piece(in, fmt::format("b{}.", i)));
  return d;
}

std::vector<Description> describe_all(const ModelParts& parts,
                                      const ::torch::optim::Optimizer& optimizer,
                                      bool with_values) {
  Description mine{.groups = static_cast<int64_t>(optimizer.param_groups().size())};
  for (size_t i = 0; i < parts.parameters.size(); ++i)
    mine.params.push_back(describe_param(parts, i, optimizer, with_values));
  for (size_t i = 0; i < parts.buffers.size(); ++i) {
    const auto& [name, buffer] = parts.buffers[i];
    mine.buffers.push_back({.name = name, .full_shape = buffer.sizes().vec(),
                            .stage = parts.stage, .position = static_cast<int64_t>(i),
                            .rank = lt::rank(),
                            .dtype = static_cast<int64_t>(buffer.scalar_type())});
    if (with_values) mine.buffers.back().value = buffer.detach();
  }
  std::vector<Description> all;
  for (const std::string& bytes : lt::allgather_bytes(encode(mine), "model_checkpoint.describe"))
    all.push_back(decode(bytes));
  for (const Description& d : all)
    if (d.groups != mine.groups)
      throw Error(fmt::format("model checkpoint: optimizers have {} and {} param groups on "
                              "different ranks (build the same groups on every stage)",
                              mine.groups, d.groups));
  return all;
}

// One whole parameter (or buffer) and the slices that hold it, deduplicated.
struct Whole {
  std::string name;
  std::vector<int64_t> shape;
  int64_t group = -1, dim = 0, dtype = 0;
  std::vector<const Piece*> slices{};  // by begin
};

// Note [Whole-model view]: single-process order, consistent descriptions.
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
    if (fresh) wholes.push_back({.name = p->name, .shape = p->full_shape, .group = p->group,
                                 .dim = p->dim, .dtype = p->dtype});
    Whole& w = wholes[it->second];
    if (w.shape != p->full_shape || w.group != p->group || w.dim != p->dim)
      throw Error(fmt::format("model checkpoint: '{}' is {} in param group {} on one rank and {} in "
                              "group {} on rank {} (build the same model on every rank)",
                              w.name, c10::str(c10::IntArrayRef(w.shape)), w.group,
                              c10::str(c10::IntArrayRef(p->full_shape)),
                              p->group, p->rank));
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
      throw Error(fmt::format("model checkpoint: the slices of '{}' cover {} of its {} entries "
                              "along dim {}", w.name, next, w.shape[w.dim], w.dim));
  }
  return wholes;
}

bool is_sliced(const Whole& w) { return w.slices.front()->length >= 0; }

Tensor assemble_value(const Whole& w) {
  if (!is_sliced(w)) return w.slices.front()->value.clone();
  std::vector<Tensor> parts;
  for (const Piece* s : w.slices) parts.push_back(s->value);
  return ::torch::cat(parts, w.dim);
}

StateValues assemble_state(const Whole& w) {
  std::vector<StateValues> parts;
  for (const Piece* s : w.slices) {
    if (s->state.empty() != w.slices.front()->state.empty())
      throw Error(fmt::format("model checkpoint: '{}' has optimizer state on some ranks only "
                              "(step every stage's optimizer the same number of times)", w.name));
    if (!s->state.empty()) parts.push_back(parse_state(s->state));
  }
  if (parts.empty() || !is_sliced(w)) return parts.empty() ? StateValues{} : parts.front();
  StateValues merged;
  for (size_t k = 0; k < parts.front().size(); ++k) {
    const auto& [key, first] = parts.front()[k];
    const auto slice_shape = w.slices.front()->value.sizes();
    if (!first.isTensor() || !first.toTensor().defined() ||
        !first.toTensor().sizes().equals(slice_shape)) {
      merged.emplace_back(key, first);
      continue;
    }
    std::vector<Tensor> slices;
    for (const StateValues& values : parts) slices.push_back(values.at(k).second.toTensor());
    merged.emplace_back(key, ::torch::cat(slices, w.dim));
  }
  return merged;
}

// Shows `optimizer` the whole parameters for the duration of `body`: its
// param groups hold `whole_groups` and its state `state`; afterwards both are
// put back and the state `body` left is returned.
using detail::StateMap;
StateMap with_whole_view(::torch::optim::Optimizer& optimizer,
                         const std::vector<std::vector<Tensor>>& whole_groups, StateMap state,
                         const std::function<void()>& body) {
  auto& groups = optimizer.param_groups();
  std::vector<std::vector<Tensor>> local;
  for (size_t g = 0; g < groups.size(); ++g) {
    local.push_back(groups[g].params());
    groups[g].params() = whole_groups[g];
  }
  StateMap stashed = std::move(optimizer.state());
  optimizer.state() = std::move(state);
  auto restore = [&] {
    for (size_t g = 0; g < groups.size(); ++g) groups[g].params() = local[g];
    StateMap left = std::move(optimizer.state());
    optimizer.state() = std::move(stashed);
    return left;
  };
  try {
    body();
  } catch (...) {
    restore();
    throw;
  }
  return restore();
}

std::vector<std::vector<Tensor>> grouped(const std::vector<Whole>& wholes,
                                         const std::vector<Tensor>& tensors, size_t groups) {
  std::vector<std::vector<Tensor>> out(groups);
  for (size_t i = 0; i < wholes.size(); ++i)
    if (wholes[i].group >= 0) out.at(wholes[i].group).push_back(tensors[i]);
  return out;
}

const State* any_local_state(const ::torch::optim::Optimizer& optimizer) {
  return optimizer.state().empty() ? nullptr : optimizer.state().begin()->second.get();
}

}  // namespace

namespace {

// Every whole tensor of `all` and its optimizer state, assembled on this
// rank, as a module and as `optimizer`'s view while `body` runs.
void with_whole_model(const std::vector<Description>& all, ::torch::optim::Optimizer& optimizer,
                      const std::function<void(::torch::nn::Module&)>& body) {
  const auto params = whole_list(all, false), buffers = whole_list(all, true);
  auto module = std::make_shared<detail::NamedTensors>();
  std::vector<Tensor> values;
  StateMap state;
  const State* prototype = any_local_state(optimizer);
  for (const Whole& w : params) {
    values.push_back(assemble_value(w));
    module->add(w.name, values.back(), /*buffer=*/false);
    StateValues merged = assemble_state(w);
    if (merged.empty()) continue;
    if (!prototype)
      throw Error(fmt::format("model checkpoint: rank {}'s optimizer has no state to type the "
                              "others' (step it before saving)", lt::rank()));
    state[state_key(values.back())] = state_from_values(*prototype, merged);
  }
  for (const Whole& w : buffers) module->add(w.name, assemble_value(w), /*buffer=*/true);
  with_whole_view(optimizer, grouped(params, values, optimizer.param_groups().size()),
                  std::move(state), [&] { body(*module); });
}

// Placeholders of the whole shapes and dtypes (allocated, not touched until
// the load copies into them, so the file is checked against the whole
// model), loaded by `load`; then this rank's slices of them are taken.
bool load_whole_model(const ModelParts& parts, ::torch::optim::Optimizer& optimizer,
                      const std::function<bool(::torch::nn::Module&)>& load) {
  const auto all = describe_all(parts, optimizer, /*with_values=*/false);
  const auto params = whole_list(all, false), buffers = whole_list(all, true);
  auto module = std::make_shared<detail::NamedTensors>();
  std::vector<Tensor> placeholders;
  auto whole_tensor = [](const Whole& w) {
    return ::torch::empty(w.shape, ::torch::TensorOptions().dtype(
                                       static_cast<::torch::ScalarType>(w.dtype)));
  };
  for (const Whole& w : params) {
    placeholders.push_back(whole_tensor(w));
    module->add(w.name, placeholders.back(), /*buffer=*/false);
  }
  for (const Whole& w : buffers) module->add(w.name, whole_tensor(w), /*buffer=*/true);
  bool found = false;
  StateMap whole_state = with_whole_view(
      optimizer, grouped(params, placeholders, optimizer.param_groups().size()), {},
      [&] { found = load(*module); });
  if (!found) return false;
  detail::take_slices(*module, parts, whole_state, optimizer);
  return true;
}

}  // namespace

void save_checkpoint(const std::string& path, const ModelParts& parts,
                     ::torch::optim::Optimizer& optimizer, const lt::TrainingProgress& progress) {
  const auto all = describe_all(parts, optimizer, /*with_values=*/true);
  if (lt::rank() != 0) return;  // only rank 0 writes (as lockstep::torch::save_checkpoint)
  with_whole_model(all, optimizer, [&](::torch::nn::Module& whole) {
    lt::save_checkpoint(path, whole, optimizer, progress);
  });
}

bool load_checkpoint(const std::string& path, const ModelParts& parts,
                     ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  return load_whole_model(parts, optimizer, [&](::torch::nn::Module& whole) {
    return lt::load_checkpoint(path, whole, optimizer, progress);
  });
}

void save_checkpoint_dir(CheckpointWriter& writer, const ModelParts& parts,
                         ::torch::optim::Optimizer& optimizer,
                         const lt::TrainingProgress& progress) {
  // Every rank assembles the whole model (describe_all gathered every
  // slice to every rank) and writes its share of the directory.
  const auto all = describe_all(parts, optimizer, /*with_values=*/true);
  with_whole_model(all, optimizer, [&](::torch::nn::Module& whole) {
    writer.save(whole, optimizer, progress);
  });
}

bool load_checkpoint_dir(const std::string& root, const ModelParts& parts,
                         ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  return load_whole_model(parts, optimizer, [&](::torch::nn::Module& whole) {
    return load_checkpoint_dir(root, whole, optimizer, progress);
  });
}

ModelParts model_parts(::torch::nn::Module& module) {
  ModelParts parts;
  for (const auto& item : module.named_parameters()) parts.parameters.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) parts.buffers.emplace_back(item.key(), item.value());
  parts.shards = detail::shards_by_name(module, parts.parameters);
  return parts;
}

ModelParts model_parts(Pipeline& pipeline) {
  ModelParts parts{.parameters = pipeline.named_parameters(), .buffers = pipeline.named_buffers(),
                   .stage = pipeline.stage()};
  parts.shards = detail::shards_by_name(*pipeline.module(), parts.parameters);
  return parts;
}

}  // namespace lockstep::parallel
