// The routed load of a checkpoint directory (Note [Routed checkpoint saves]
// in checkpoint_dir_routed_save.cc): each rank reads, straight from the
// files, the byte ranges of its own pieces, so no rank holds the whole model
// or optimizer state, whatever world size or strategy wrote the files.
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <map>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/base/safetensors.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/safetensors.h"
#include "lockstep/torch/state_check.h"
#include "parallel/checkpoint_dir_impl.h"

namespace lockstep::parallel::detail::ckdir {
namespace lt = lockstep::torch;
using ::torch::Tensor;

RangeReader::RangeReader(std::string dir, const Manifest& m) : dir_(std::move(dir)), m_(m) {
  for (const Entry& e : m.tensors) entries_.emplace(e.name, &e);
}

RangeReader::~RangeReader() {
  for (auto& [key, file] : files_) ::close(file.fd);
}

const Entry& RangeReader::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    throw Error(
        fmt::format("checkpoint directory {}: the manifest has no tensor '{}'; the "
                    "folder is damaged, load an older step",
                    dir_, name));
  return *it->second;
}

void RangeReader::read_into(const std::string& name, int64_t offset, const Tensor& out) {
  const Entry& e = entry(name);
  LOCKSTEP_DCHECK(out.is_contiguous() && out.scalar_type() == e.dtype,
                  "RangeReader: {} read into a tensor of another dtype or layout", name);
  const int64_t count = out.numel();
  if (offset < 0 || offset + count > c10::multiply_integers(e.shape))
    throw Error(
        fmt::format("checkpoint directory {}: elements [{}, +{}) of '{}' are past its "
                    "shape {}",
                    dir_, offset, count, name, c10::str(c10::IntArrayRef(e.shape))));
  const File& f = file(e.part, e.rank);
  const SafetensorsEntry& span = f.spans.at(name);
  const int64_t size = static_cast<int64_t>(::torch::elementSize(e.dtype));
  read_all_at(f.fd, out.data_ptr(), static_cast<uint64_t>(count * size),
              f.data_start + span.begin + static_cast<uint64_t>(offset * size), f.path);
}

Tensor RangeReader::read(const std::string& name, int64_t offset, int64_t count) {
  Tensor out = ::torch::empty({count}, ::torch::TensorOptions().dtype(entry(name).dtype));
  read_into(name, offset, out);
  return out;
}

Tensor RangeReader::read_whole(const std::string& name) {
  const Entry& e = entry(name);
  return read(name, 0, c10::multiply_integers(e.shape)).view(e.shape);
}

const RangeReader::File& RangeReader::file(Part part, int rank) {
  const auto key = std::make_pair(static_cast<int>(part), rank);
  if (auto it = files_.find(key); it != files_.end()) return it->second;
  File& f = files_[key];  // closed by the destructor once open
  f.path = dir_ + "/" + file_name(part, rank, m_.world_size);
  f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    const std::string path = f.path;
    files_.erase(key);
    throw Error(
        fmt::format("checkpoint directory {}: cannot open {}; the folder is damaged, "
                    "load an older step",
                    dir_, path));
  }
  const SafetensorsHeader header = read_safetensors_header(f.fd, f.path);
  std::vector<lt::TensorInfo> expected, found;
  for (const Entry& e : m_.tensors)
    if (e.part == part && e.rank == rank) expected.push_back({e.name, e.dtype, e.shape});
  for (const SafetensorsEntry& s : header.entries) {
    found.push_back({s.name, lt::scalar_type_of(s.dtype), s.shape});
    f.spans.emplace(s.name, s);
  }
  lt::check_state_matches(expected, found,
                          "safetensors file " + f.path + " (against its manifest)");
  f.data_start = header.data_start;
  return f;
}

namespace {

std::map<std::string, int> param_index(const ShardedView& view) {
  std::map<OptimizerStateKey, int> by_key;
  for (size_t p = 0; p < view.params.size(); ++p) by_key.emplace(state_key(view.params[p]), p);
  std::map<std::string, int> out;
  for (const auto& item : view.module->named_parameters()) {
    auto it = by_key.find(state_key(item.value()));
    if (it == by_key.end())
      throw InvalidArgument(
          fmt::format("checkpoint directory: parameter {} of the module is not "
                      "held by the sharded strategy",
                      item.key()));
    out.emplace(item.key(), it->second);
  }
  return out;
}

// Each parameter's first name in the module's order (a tied one has more),
// the name its optimizer state is saved under.
std::vector<std::string> first_names(const ShardedView& view,
                                     const std::map<std::string, int>& index) {
  std::vector<std::string> names(view.params.size());
  for (const auto& item : view.module->named_parameters())
    if (names[index.at(item.key())].empty()) names[index.at(item.key())] = item.key();
  return names;
}

void check_against(const Manifest& m, const ShardedView& view,
                   const std::map<std::string, int>& index,
                   const ::torch::optim::Optimizer& optimizer, const std::string& what) {
  std::vector<lt::TensorInfo> here;
  for (const auto& item : view.module->named_parameters())
    here.push_back({item.key(), view.dtype, view.shapes[index.at(item.key())]});
  for (const auto& item : view.module->named_buffers())
    here.push_back({item.key(), item.value().scalar_type(), item.value().sizes().vec()});
  lt::check_state_matches(here, part_infos(m, Part::kModel), what);
  const auto names = first_names(view, index);
  std::vector<std::vector<std::string>> live;
  for (const auto& group : view.groups) {
    live.emplace_back();
    for (int p : group) live.back().push_back(names[p]);
  }
  check_optimizer_groups(m, optimizer, live, what);
  check_state_entries(m, what);
}

void stage_optimizer(Staged& out, RangeReader& files, const Manifest& m, const ShardedView& view,
                     const std::vector<std::string>& names,
                     const ::torch::optim::Optimizer& optimizer) {
  std::map<OptimizerStateKey, size_t> piece_of;
  for (size_t i = 0; i < view.pieces.size(); ++i)
    piece_of.emplace(state_key(view.pieces[i].tensor), i);
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    ParamGroupInfo group{.params = {}, .lr = 0, .options = m.optimizer.groups[g].options};
    for (const Tensor& t : optimizer.param_groups()[g].params()) {
      auto it = piece_of.find(state_key(t));
      if (it == piece_of.end())
        throw InvalidArgument(
            "checkpoint directory: the optimizer steps a tensor that is not one "
            "of the strategy's shards; build it on the strategy's parameters");
      const PieceRef& piece = view.pieces[it->second];
      const std::string id = fmt::format("piece{}", it->second);
      group.params.push_back(id);
      auto slots = m.optimizer.state.find(names[piece.param]);
      if (slots == m.optimizer.state.end()) continue;
      out.optimizer_part.optimizer.state[id] = slots->second;
      for (const StateSlot& slot : slots->second) {
        const std::string name = names[piece.param] + "." + slot.key;
        const Entry& e = files.entry(name);
        Tensor v = slot.kind == "tensor" && e.shape == view.shapes[piece.param]
                       ? files.read(name, piece.offset, piece.length)
                       : files.read_whole(name);
        if (view.whole_tensors && v.dim() == 1 && e.shape == view.shapes[piece.param])
          v = v.view(e.shape);
        out.state.emplace(id + "." + slot.key, std::move(v));
      }
    }
    out.optimizer_part.optimizer.groups.push_back(std::move(group));
  }
}

}  // namespace

void load_routed(const std::string& dir, const Manifest& m, const ShardedView& view,
                 ::torch::optim::Optimizer& optimizer, lt::TrainingProgress& progress) {
  const std::string what = "checkpoint directory " + dir;
  const auto index = param_index(view);
  check_against(m, view, index, optimizer, what);
  const auto names = first_names(view, index);
  RangeReader files(dir, m);
  Staged staged;
  if (view.whole_params) {
    for (const auto& item : view.module->named_parameters())
      staged.copies.emplace_back(item.value(), files.read_whole(item.key()));
  } else {
    for (const PieceRef& piece : view.pieces)
      staged.copies.emplace_back(piece.tensor.view({-1}),
                                 files.read(names[piece.param], piece.offset, piece.length));
  }
  for (const auto& item : view.module->named_buffers())
    staged.copies.emplace_back(item.value(), files.read_whole(item.key()));
  stage_optimizer(staged, files, m, view, names, optimizer);
  commit_staged(staged, m, optimizer, progress);
}

void commit_staged(Staged& staged, const Manifest& m, ::torch::optim::Optimizer& optimizer,
                   lt::TrainingProgress& progress) {
  {
    ::torch::NoGradGuard no_grad;
    for (auto& [to, value] : staged.copies) to.detach().copy_(value.view(to.sizes()));
  }
  staged.copies.clear();  // before the optimizer's state is built: one staged copy at a time
  load_optimizer_state(staged.optimizer_part, staged.state, optimizer);
  progress = m.progress;
  set_generator_state_hex(m.world_size == lt::size() ? m.rng.at(lt::rank()) : m.rng.at(0));
}

}  // namespace lockstep::parallel::detail::ckdir
