// The routed load of a tensor- or pipeline-parallel model's checkpoint
// directory, the pair of Note [Routed saves of model parts]. The ranks
// all-gather descriptions only (names, whole shapes, slices, param groups),
// check the manifest against the whole model they describe, and each rank
// reads from the files just the runs of its own slices (a slice along dim d
// of a whole tensor of shape S is prod(S[:d]) contiguous runs) and of their
// elementwise optimizer state. A rank holds its own tensors and one staged
// copy of them: never the whole model, whatever layout wrote the files.
#include <fmt/format.h>

#include <map>

#include "lockstep/base/error.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/state_check.h"
#include "parallel/checkpoint_dir_impl.h"
#include "parallel/named_tensors.h"

namespace lockstep::parallel::detail::ckdir {
namespace {

namespace lt = lockstep::torch;
using ::torch::Tensor;

// The whole model against the manifest: tensors, optimizer type and groups
// (each group's parameters in the whole model's order, as a single-process
// save lists them).
void check_whole(const Manifest& m, const std::vector<Whole>& params,
                 const std::vector<Whole>& buffers, const ::torch::optim::Optimizer& optimizer,
                 const std::string& what) {
  std::vector<lt::TensorInfo> here;
  for (const auto* list : {&params, &buffers})
    for (const Whole& w : *list)
      here.push_back({w.name, static_cast<::torch::ScalarType>(w.dtype), w.shape});
  lt::check_state_matches(here, part_infos(m, Part::kModel), what);
  std::vector<std::vector<std::string>> live(optimizer.param_groups().size());
  for (const Whole& w : params)
    if (w.group >= 0) live.at(static_cast<size_t>(w.group)).push_back(w.name);
  check_optimizer_groups(m, optimizer, live, what);
  check_state_entries(m, what);
}

// This rank's slice `piece` of entry `name`, shaped like `like`: one read
// per run (slice_runs). An entry not of the piece's whole shape is read whole.
Tensor read_slice(RangeReader& files, const std::string& name, const Piece& piece,
                  const Tensor& like) {
  const Entry& e = files.entry(name);
  Tensor out = ::torch::empty(like.sizes(), ::torch::TensorOptions().dtype(e.dtype));
  if (piece.length < 0 || e.shape != piece.full_shape) {  // whole (or not elementwise)
    if (e.shape != like.sizes().vec())
      throw Error(fmt::format("checkpoint directory: '{}' is {} in the files, {} here", name,
                              c10::str(c10::IntArrayRef(e.shape)), c10::str(like.sizes())));
    files.read_into(name, 0, out);
    return out;
  }
  const SliceRuns runs = slice_runs(e.shape, piece.dim, piece.begin, piece.length);
  const Tensor flat = out.view({-1});
  if (runs.run == 0) return out;
  for (int64_t o = 0; o < runs.count; ++o)
    files.read_into(name, runs.at(o), flat.narrow(0, o * runs.run, runs.run));
  return out;
}

void stage_state(Staged& out, RangeReader& files, const Manifest& m, const ModelParts& parts,
                 const Description& mine, const ::torch::optim::Optimizer& optimizer) {
  std::map<OptimizerStateKey, size_t> position;
  for (size_t i = 0; i < parts.parameters.size(); ++i)
    position.emplace(state_key(parts.parameters[i].second), i);
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    ParamGroupInfo group{.params = {}, .lr = 0, .options = m.optimizer.groups[g].options};
    for (const Tensor& t : optimizer.param_groups()[g].params()) {
      auto it = position.find(state_key(t));
      if (it == position.end())
        throw InvalidArgument(
            "checkpoint directory: the optimizer steps a tensor that is not one "
            "of the model parts' parameters; build it on model_parts(x)'s");
      const auto& [name, local] = parts.parameters[it->second];
      group.params.push_back(name);
      auto slots = m.optimizer.state.find(name);
      if (slots == m.optimizer.state.end()) continue;
      out.optimizer_part.optimizer.state[name] = slots->second;
      for (const StateSlot& slot : slots->second) {
        const std::string key = name + "." + slot.key;
        const Entry& e = files.entry(key);
        out.state.emplace(key,
                          slot.kind == "tensor" && e.shape == mine.params[it->second].full_shape
                              ? read_slice(files, key, mine.params[it->second], local)
                              : files.read_whole(key));
      }
    }
    out.optimizer_part.optimizer.groups.push_back(std::move(group));
  }
}

}  // namespace

bool load_parts_routed(const std::string& root, const ModelParts& parts,
                       ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  const auto all = describe_all(parts, optimizer, Describe::kShapes);  // collective: first
  const auto params = whole_list(all, false), buffers = whole_list(all, true);
  std::string dir;
  Manifest m;
  if (!newest_complete(root, &dir, &m)) return false;
  const std::string what = "checkpoint directory " + dir;
  check_whole(m, params, buffers, optimizer, what);
  const Description& mine = all.at(static_cast<size_t>(lt::rank()));
  RangeReader files(dir, m);
  Staged staged;
  for (size_t i = 0; i < parts.parameters.size(); ++i) {
    const auto& [name, local] = parts.parameters[i];
    staged.copies.emplace_back(local, read_slice(files, name, mine.params.at(i), local));
  }
  for (const auto& [name, buffer] : parts.buffers)
    staged.copies.emplace_back(buffer, files.read_whole(name));
  stage_state(staged, files, m, parts, mine, optimizer);
  commit_staged(staged, m, optimizer, progress);
  return true;
}

}  // namespace lockstep::parallel::detail::ckdir
