// A module and optimizer taken apart into named tensors for a checkpoint
// directory, and the optimizer put together again, without a list of
// optimizer types (parallel/optimizer_state.h: every state's serialize()).
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Type.h>
#include <fmt/format.h>

#include <cstring>
#include <typeinfo>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/objects.h"
#include "lockstep/torch/state_check.h"
#include "parallel/checkpoint_dir_impl.h"

namespace lockstep::parallel::detail::ckdir {
namespace {

namespace lt = lockstep::torch;
using ::torch::Tensor;

std::string type_name(const ::torch::optim::Optimizer& optimizer) {
  return c10::demangle(typeid(optimizer).name());
}

std::map<OptimizerStateKey, std::string> names_by_key(const ::torch::nn::Module& module) {
  std::map<OptimizerStateKey, std::string> out;
  for (const auto& item : module.named_parameters())
    out.emplace(state_key(item.value()), item.key());
  return out;
}

std::string name_of(const std::map<OptimizerStateKey, std::string>& names, const Tensor& param) {
  auto it = names.find(state_key(param));
  if (it == names.end())
    throw InvalidArgument(
        "checkpoint directory: the optimizer holds a parameter that is not one "
        "of the module's; build the optimizer on this module's parameters");
  return it->second;
}

c10::IValue from_tensor(const Tensor& t, const std::string& kind, const ::torch::Device& device) {
  if (kind == "int") return t.item<int64_t>();
  if (kind == "double") return t.item<double>();
  if (kind == "bool") return t.item<bool>();
  return t.to(device).clone();
}

void add(Snapshot& s, std::string name, Part part, const Tensor& t) {
  Tensor v = t.detach().to(::torch::kCPU).contiguous();  // a view where it can be
  s.manifest.tensors.push_back({.name = std::move(name),
                                .part = part,
                                .dtype = v.scalar_type(),
                                .shape = v.sizes().vec(),
                                .bytes = static_cast<uint64_t>(v.numel()) * v.element_size()});
  s.values.push_back(std::move(v));
}

}  // namespace

std::string options_hex(const ::torch::optim::OptimizerOptions& options) {
  ::torch::serialize::OutputArchive archive;
  options.serialize(archive);
  return to_hex(lt::archive_to_bytes(archive));
}

// A state value as a tensor, and the kind that turns it back.
std::pair<Tensor, std::string> state_value_tensor(const c10::IValue& v, const std::string& where) {
  if (v.isTensor()) return {v.toTensor(), "tensor"};
  if (v.isInt()) return {::torch::scalar_tensor(v.toInt(), ::torch::kLong), "int"};
  if (v.isDouble()) return {::torch::scalar_tensor(v.toDouble(), ::torch::kDouble), "double"};
  if (v.isBool()) return {::torch::scalar_tensor(v.toBool(), ::torch::kBool), "bool"};
  throw InvalidArgument(
      fmt::format("checkpoint directory: optimizer state {} is a {}, which a "
                  "checkpoint directory cannot store (tensors, ints, doubles "
                  "and bools only); use lockstep::torch::save_checkpoint",
                  where, v.tagKind()));
}

Snapshot take_snapshot(const ::torch::nn::Module& module,
                       const ::torch::optim::Optimizer& optimizer,
                       const lt::TrainingProgress& progress) {
  Snapshot s;
  s.manifest.progress = progress;
  for (const auto& item : module.named_parameters()) add(s, item.key(), Part::kModel, item.value());
  for (const auto& item : module.named_buffers()) add(s, item.key(), Part::kModel, item.value());
  const auto names = names_by_key(module);
  OptimizerInfo& info = s.manifest.optimizer;
  info.type = type_name(optimizer);
  for (const auto& group : optimizer.param_groups()) {
    ParamGroupInfo g{
        .params = {}, .lr = group.options().get_lr(), .options = options_hex(group.options())};
    for (const Tensor& p : group.params()) {
      g.params.push_back(name_of(names, p));
      auto it = optimizer.state().find(state_key(p));
      if (it == optimizer.state().end()) continue;
      auto& slots = info.state[g.params.back()];
      for (const auto& [key, value] : state_values(*it->second)) {
        if (value.isTensor() && !value.toTensor().defined()) continue;
        auto [t, kind] = state_value_tensor(value, g.params.back() + "." + key);
        slots.push_back({key, kind});
        add(s, g.params.back() + "." + key, Part::kOptimizer, t);
      }
    }
    info.groups.push_back(std::move(g));
  }
  return s;
}

void keep_own_copies(Snapshot& s, int rank) {
  LOCKSTEP_DCHECK_EQ(s.values.size(), s.manifest.tensors.size());
  for (size_t i = 0; i < s.values.size(); ++i)
    s.values[i] = s.manifest.tensors[i].rank == rank ? s.values[i].clone() : Tensor();
}

void check_optimizer_groups(const Manifest& m, const ::torch::optim::Optimizer& optimizer,
                            const std::vector<std::vector<std::string>>& live,
                            const std::string& what) {
  const OptimizerInfo& saved = m.optimizer;
  if (saved.type != type_name(optimizer))
    throw Error(
        fmt::format("{}: saved with a {}, loaded into a {}; build the optimizer the saving "
                    "run used",
                    what, saved.type, type_name(optimizer)));
  if (saved.groups.size() != live.size())
    throw Error(
        fmt::format("{}: {} param groups saved, the optimizer has {}; build its groups as "
                    "the saving run did",
                    what, saved.groups.size(), live.size()));
  for (size_t g = 0; g < live.size(); ++g)
    if (live[g] != saved.groups[g].params)
      throw Error(
          fmt::format("{}: param group {} holds [{}] in the checkpoint and [{}] here; build "
                      "the optimizer's groups as the saving run did",
                      what, g, fmt::join(saved.groups[g].params, ", "), fmt::join(live[g], ", ")));
}

void check_optimizer_matches(const Manifest& m, const ::torch::nn::Module& module,
                             const ::torch::optim::Optimizer& optimizer, const std::string& what) {
  const OptimizerInfo& saved = m.optimizer;
  const auto names = names_by_key(module);
  std::vector<std::vector<std::string>> live;
  for (const auto& group : optimizer.param_groups()) {
    live.emplace_back();
    for (const Tensor& p : group.params()) live.back().push_back(name_of(names, p));
  }
  check_optimizer_groups(m, optimizer, live, what);
  // State the optimizer holds already (it has stepped) must have the saved shapes.
  std::map<std::string, const Entry*> saved_entries;
  for (const Entry& e : m.tensors)
    if (e.part == Part::kOptimizer) saved_entries.emplace(e.name, &e);
  std::vector<lt::TensorInfo> here, found;
  for (const auto& [key, state] : optimizer.state()) {
    auto n = names.find(key);
    if (n == names.end() || !saved.state.count(n->second)) continue;
    for (const auto& [k, v] : state_values(*state)) {
      if (!v.isTensor() || !v.toTensor().defined()) continue;
      const std::string name = n->second + "." + k;
      here.push_back({name, v.toTensor().scalar_type(), v.toTensor().sizes().vec()});
      if (auto it = saved_entries.find(name); it != saved_entries.end())
        found.push_back({name, it->second->dtype, it->second->shape});
    }
  }
  lt::check_state_matches(here, found, what + " (optimizer state)");
}

void load_optimizer_state(const Manifest& m, const std::map<std::string, Tensor>& tensors,
                          ::torch::optim::Optimizer& optimizer) {
  // LibTorch's own optimizer archive (torch/optim/serialize.h), keyed by our
  // own ids, so Optimizer::load builds states of its own type.
  ::torch::serialize::OutputArchive top;
  auto cu = top.compilation_unit();
  ::torch::serialize::OutputArchive state(cu), groups(cu);
  auto& live = optimizer.param_groups();
  groups.write("param_groups/size", ::torch::tensor(static_cast<int64_t>(live.size())));
  int64_t next_id = 0;
  for (size_t g = 0; g < live.size(); ++g) {
    ::torch::serialize::OutputArchive group(cu), options(cu);
    const auto& params = live[g].params();
    group.write("params/size", ::torch::tensor(static_cast<int64_t>(params.size())));
    for (size_t j = 0; j < params.size(); ++j) {
      const std::string id = std::to_string(next_id++);
      group.write("params/" + std::to_string(j), c10::IValue(id));
      auto it = m.optimizer.state.find(m.optimizer.groups[g].params[j]);
      if (it == m.optimizer.state.end()) continue;
      ::torch::serialize::OutputArchive one(cu);
      for (const StateSlot& slot : it->second)
        one.write(slot.key, from_tensor(tensors.at(it->first + "." + slot.key), slot.kind,
                                        params[j].device()));
      state.write(id, one);
    }
    live[g].options().serialize(options);
    group.write("options", options);
    groups.write("param_groups/" + std::to_string(g), group);
  }
  top.write("pytorch_version", c10::IValue(std::string("1.5.0")));
  top.write("state", state);
  top.write("param_groups", groups);
  ::torch::serialize::InputArchive in;
  lt::archive_from_bytes(in, lt::archive_to_bytes(top));
  optimizer.state().clear();
  optimizer.load(in);
  // LibTorch 1.13's load assigns options through the base class: set them here.
  for (size_t g = 0; g < live.size(); ++g) {
    ::torch::serialize::InputArchive options;
    lt::archive_from_bytes(options, from_hex(m.optimizer.groups[g].options, "param group options"));
    live[g].options().serialize(options);
  }
}

std::string generator_state_hex() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  Tensor state = gen.get_state().contiguous();
  return to_hex(std::string(static_cast<const char*>(state.data_ptr()), state.nbytes()));
}

void set_generator_state_hex(const std::string& hex) {
  const std::string bytes = from_hex(hex, "checkpoint manifest: RNG state");
  Tensor state = ::torch::empty({static_cast<int64_t>(bytes.size())}, ::torch::kUInt8);
  std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace lockstep::parallel::detail::ckdir
