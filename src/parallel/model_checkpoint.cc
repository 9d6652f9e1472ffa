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
#include "lockstep/torch/state_layout.h"
#include "parallel/checkpoint_dir_impl.h"
#include "parallel/named_tensors.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;
using State = ::torch::optim::OptimizerParamState;

namespace {

Tensor assemble_value(const detail::Whole& w) {
  if (!detail::is_sliced(w)) return w.slices.front()->value.clone();
  std::vector<Tensor> parts;
  for (const detail::Piece* s : w.slices) parts.push_back(s->value);
  return ::torch::cat(parts, w.dim);
}

StateValues assemble_state(const detail::Whole& w) {
  std::vector<StateValues> parts;
  for (const detail::Piece* s : w.slices) {
    if (s->state.empty() != w.slices.front()->state.empty())
      throw Error(
          fmt::format("model checkpoint: '{}' has optimizer state on some ranks only "
                      "(step every stage's optimizer the same number of times)",
                      w.name));
    if (!s->state.empty()) parts.push_back(parse_state(s->state));
  }
  if (parts.empty() || !detail::is_sliced(w)) return parts.empty() ? StateValues{} : parts.front();
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

std::vector<std::vector<Tensor>> grouped(const std::vector<detail::Whole>& wholes,
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
void with_whole_model(const std::vector<detail::Description>& all,
                      ::torch::optim::Optimizer& optimizer,
                      const std::function<void(::torch::nn::Module&)>& body) {
  const auto params = detail::whole_list(all, false), buffers = detail::whole_list(all, true);
  auto module = std::make_shared<detail::NamedTensors>();
  std::vector<Tensor> values;
  StateMap state;
  const State* prototype = any_local_state(optimizer);
  for (const detail::Whole& w : params) {
    values.push_back(assemble_value(w));
    module->add(w.name, values.back(), /*buffer=*/false);
    StateValues merged = assemble_state(w);
    if (merged.empty()) continue;
    if (!prototype)
      throw Error(
          fmt::format("model checkpoint: rank {}'s optimizer has no state to type the "
                      "others' (step it before saving)",
                      lt::rank()));
    state[state_key(values.back())] = state_from_values(*prototype, merged);
  }
  for (const detail::Whole& w : buffers) module->add(w.name, assemble_value(w), /*buffer=*/true);
  with_whole_view(optimizer, grouped(params, values, optimizer.param_groups().size()),
                  std::move(state), [&] { body(*module); });
}

// Placeholders of the whole shapes and dtypes (allocated, not touched until
// the load copies into them, so the file is checked against the whole
// model), loaded by `load`; then this rank's slices of them are taken.
bool load_whole_model(const ModelParts& parts, ::torch::optim::Optimizer& optimizer,
                      const std::function<bool(::torch::nn::Module&)>& load) {
  const auto all = detail::describe_all(parts, optimizer, detail::Describe::kShapes);
  const auto params = detail::whole_list(all, false), buffers = detail::whole_list(all, true);
  auto module = std::make_shared<detail::NamedTensors>();
  std::vector<Tensor> placeholders;
  auto whole_tensor = [](const detail::Whole& w) {
    return ::torch::empty(
        w.shape, ::torch::TensorOptions().dtype(static_cast<::torch::ScalarType>(w.dtype)));
  };
  for (const detail::Whole& w : params) {
    placeholders.push_back(whole_tensor(w));
    module->add(w.name, placeholders.back(), /*buffer=*/false);
  }
  for (const detail::Whole& w : buffers) module->add(w.name, whole_tensor(w), /*buffer=*/true);
  bool found = false;
  StateMap whole_state =
      with_whole_view(optimizer, grouped(params, placeholders, optimizer.param_groups().size()), {},
                      [&] { found = load(*module); });
  if (!found) return false;
  detail::take_slices(*module, parts, whole_state, optimizer);
  return true;
}

}  // namespace

void save_checkpoint(const std::string& path, const ModelParts& parts,
                     ::torch::optim::Optimizer& optimizer, const lt::TrainingProgress& progress) {
  const auto all = detail::describe_all(parts, optimizer, detail::Describe::kValues);
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
  writer.save(parts, optimizer, progress);  // routed: Note [Routed saves of model parts]
}

bool load_checkpoint_dir(const std::string& root, const ModelParts& parts,
                         ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  // Routed: each rank reads its own slices (checkpoint_dir_parts_load.cc).
  return detail::ckdir::load_parts_routed(root, parts, optimizer, progress);
}

// The one call (issue 43): a module is asked how its state is laid out, and
// a tensor-parallel one goes the ModelParts way.
void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     ::torch::optim::Optimizer& optimizer, const lt::TrainingProgress& progress) {
  if (auto parts = detail::sliced_parts(module, "save_checkpoint", path))
    return save_checkpoint(path, *parts, optimizer, progress);
  lt::save_checkpoint(path, module, optimizer, progress);  // refuses a module FSDP holds, by name
}

bool load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                     ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  if (auto parts = detail::sliced_parts(module, "load_checkpoint", path))
    return load_checkpoint(path, *parts, optimizer, progress);
  return lt::load_checkpoint(path, module, optimizer, progress);
}

void save_checkpoint(const std::string& path, Pipeline& pipeline,
                     ::torch::optim::Optimizer& optimizer, const lt::TrainingProgress& progress) {
  save_checkpoint(path, model_parts(pipeline), optimizer, progress);
}

bool load_checkpoint(const std::string& path, Pipeline& pipeline,
                     ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  return load_checkpoint(path, model_parts(pipeline), optimizer, progress);
}

bool load_checkpoint_dir(const std::string& root, Pipeline& pipeline,
                         ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  return load_checkpoint_dir(root, model_parts(pipeline), optimizer, progress);
}

namespace detail {

std::optional<ModelParts> sliced_parts(const ::torch::nn::Module& module, const char* call,
                                       const std::string& path) {
  auto partial = lt::partial_state_of(module);
  if (!partial) return std::nullopt;
  // A marked module is refused with the torch layer's message (it names
  // the owner's call); a mark is found before any PartialState layer.
  if (partial->marked) lt::detail::require_whole_state(module, call, path);
  LOCKSTEP_DCHECK(!partial->marked, "{} {}: a marked module passed require_whole_state", call,
                  path);
  return model_parts(module);
}

}  // namespace detail

ModelParts model_parts(const ::torch::nn::Module& module) {
  ModelParts parts;
  for (const auto& item : module.named_parameters())
    parts.parameters.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers())
    parts.buffers.emplace_back(item.key(), item.value());
  parts.shards = detail::shards_by_name(module, parts.parameters);
  return parts;
}

ModelParts model_parts(Pipeline& pipeline) {
  ModelParts parts{.parameters = pipeline.named_parameters(),
                   .buffers = pipeline.named_buffers(),
                   .stage = pipeline.stage()};
  parts.shards = detail::shards_by_name(*pipeline.module(), parts.parameters);
  return parts;
}

}  // namespace lockstep::parallel
