// load_checkpoint_dir: the newest complete step, checked against the model,
// the optimizer and its own files before anything changes.
#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "lockstep/base/error.h"
#include "lockstep/parallel/checkpoint.h"
#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/safetensors.h"
#include "lockstep/torch/state_check.h"
#include "parallel/checkpoint_dir_impl.h"
#include "parallel/named_tensors.h"

namespace lockstep::parallel::detail::ckdir {
namespace fs = std::filesystem;
namespace lt = lockstep::torch;
using ::torch::Tensor;

std::vector<lt::TensorInfo> part_infos(const Manifest& m, Part part) {
  std::vector<lt::TensorInfo> out;
  for (const Entry& e : m.tensors)
    if (e.part == part) out.push_back({e.name, e.dtype, e.shape});
  return out;
}

void check_state_entries(const Manifest& m, const std::string& what) {
  std::map<std::string, bool> names;
  for (const Entry& e : m.tensors)
    if (e.part == Part::kOptimizer) names[e.name] = true;
  for (const auto& [param, slots] : m.optimizer.state)
    for (const StateSlot& s : slots)
      if (!names.count(param + "." + s.key))
        throw Error(
            fmt::format("{}: the manifest lists optimizer state '{}.{}' but no file holds "
                        "it; the folder is damaged, load an older step",
                        what, param, s.key));
}

bool newest_complete(const std::string& root, std::string* dir, Manifest* manifest) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return false;
  remove_incomplete_steps(root);  // start-up is when an interrupted save is found
  const auto complete = complete_steps(root);
  if (complete.empty()) return false;
  *dir = complete.back();
  *manifest = parse_manifest(read_whole_file(*dir + "/" + kManifest), *dir + "/" + kManifest);
  return true;
}

namespace {

// Every tensor of one part, from all ranks' files, each file checked against
// the manifest (the pair of what write_rank_files wrote).
std::map<std::string, Tensor> read_part(const std::string& dir, const Manifest& m, Part part) {
  std::map<std::string, Tensor> out;
  for (int r = 0; r < m.world_size; ++r) {
    const std::string path = dir + "/" + file_name(part, r, m.world_size);
    std::vector<lt::TensorInfo> expected;
    for (const Entry& e : m.tensors)
      if (e.part == part && e.rank == r) expected.push_back({e.name, e.dtype, e.shape});
    auto contents = lt::load_safetensors(path);
    std::vector<lt::TensorInfo> found;
    for (auto& [name, t] : contents.tensors)
      found.push_back({name, t.scalar_type(), t.sizes().vec()});
    lt::check_state_matches(expected, found,
                            "safetensors file " + path + " (against its manifest)");
    for (auto& [name, t] : contents.tensors) out.emplace(name, std::move(t));
  }
  return out;
}

void copy_model(::torch::nn::Module& module, const std::map<std::string, Tensor>& tensors) {
  ::torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) item.value().copy_(tensors.at(item.key()));
  for (auto& item : module.named_buffers()) item.value().copy_(tensors.at(item.key()));
}

bool load(const std::string& root, ::torch::nn::Module& module,
          ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  std::string dir;
  Manifest m;
  if (!newest_complete(root, &dir, &m)) return false;
  const std::string what = "checkpoint directory " + dir;
  lt::check_state_matches(lt::tensor_infos(module), part_infos(m, Part::kModel), what);
  check_optimizer_matches(m, module, optimizer, what);
  check_state_entries(m, what);
  const auto model = read_part(dir, m, Part::kModel);
  const auto state = read_part(dir, m, Part::kOptimizer);
  // Everything is read and checked: from here on nothing is refused.
  copy_model(module, model);
  load_optimizer_state(m, state, optimizer);
  progress = m.progress;
  const int rank = lt::rank();
  set_generator_state_hex(m.world_size == lt::size() ? m.rng.at(rank) : m.rng.at(0));
  return true;
}

}  // namespace
}  // namespace lockstep::parallel::detail::ckdir

namespace lockstep::parallel {
namespace lt = lockstep::torch;

std::string newest_checkpoint_dir(const std::string& root) {
  const auto complete = detail::ckdir::complete_steps(root);
  return complete.empty() ? "" : complete.back();
}

bool load_checkpoint_dir(const std::string& root, ::torch::nn::Module& module,
                         ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  if (auto parts = detail::sliced_parts(module, "load_checkpoint_dir", root))
    return load_checkpoint_dir(root, *parts, optimizer, progress);  // Note [One checkpoint call]
  lt::detail::require_whole_state(module, "load_checkpoint_dir", root);
  return detail::ckdir::load(root, module, optimizer, progress);
}

// The sharded strategies read only their own byte ranges (routed) when
// their group covers the job; through the full view otherwise.
bool load_checkpoint_dir(const std::string& root, FullyShardedModel& fsdp,
                         ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  using detail::ckdir::Access;
  if (auto view = Access::view(fsdp, optimizer)) {
    std::string dir;
    detail::ckdir::Manifest m;
    if (!detail::ckdir::newest_complete(root, &dir, &m)) return false;
    Access::before_load(fsdp);
    detail::ckdir::load_routed(dir, m, *view, optimizer, progress);
    Access::after_load(fsdp);
    return true;
  }
  bool found = false;
  fsdp.with_full_view(optimizer, /*keep_changes=*/true, [&] {
    found = detail::ckdir::load(root, fsdp.wrapped(), optimizer, progress);
  });
  return found;
}

bool load_checkpoint_dir(const std::string& root, ::torch::nn::Module& module,
                         ShardedOptimizer& optimizer, lt::TrainingProgress& progress) {
  if (auto view = detail::ckdir::Access::view(module, optimizer)) {
    std::string dir;
    detail::ckdir::Manifest m;
    if (!detail::ckdir::newest_complete(root, &dir, &m)) return false;
    detail::ckdir::load_routed(dir, m, *view, optimizer.optimizer(), progress);
    return true;
  }
  bool found = false;
  auto full = optimizer.with_full_view(
      {}, [&] { found = detail::ckdir::load(root, module, optimizer.optimizer(), progress); });
  if (!found) return false;
  optimizer.rebind();
  optimizer.scatter_full_state(full);
  return true;
}

}  // namespace lockstep::parallel
