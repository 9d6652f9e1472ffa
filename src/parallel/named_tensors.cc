#include "parallel/named_tensors.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/parallel/optimizer_state.h"

namespace lockstep::parallel::detail {

using ::torch::Tensor;

void NamedTensors::add(const std::string& name, const Tensor& tensor, bool buffer) {
  const auto dot = name.find('.');
  if (dot == std::string::npos) {
    if (buffer)
      register_buffer(name, tensor);
    else
      register_parameter(name, tensor, /*requires_grad=*/false);
    return;
  }
  const std::string head = name.substr(0, dot);
  auto& child = subtrees_[head];
  if (!child) child = register_module(head, std::make_shared<NamedTensors>());
  child->add(name.substr(dot + 1), tensor, buffer);
}

Tensor NamedTensors::get(const std::string& name) const {
  const auto dot = name.find('.');
  if (dot != std::string::npos) {
    auto it = subtrees_.find(name.substr(0, dot));
    if (it != subtrees_.end()) return it->second->get(name.substr(dot + 1));
  } else if (const Tensor* t = named_parameters(false).find(name)) {
    return *t;
  } else if (const Tensor* b = named_buffers(false).find(name)) {
    return *b;
  }
  throw Error(fmt::format("model checkpoint: no tensor '{}' was read", name));
}

std::map<std::string, ShardSpec> shards_by_name(
    const ::torch::nn::Module& module,
    const std::vector<std::pair<std::string, Tensor>>& parameters) {
  std::map<const void*, ShardSpec> by_tensor;
  auto add = [&](const ::torch::nn::Module& m) {
    if (auto* sharded = dynamic_cast<const ShardedModule*>(&m))
      for (const ShardSpec& spec : sharded->shard_specs())
        if (const Tensor* p = m.named_parameters(false).find(spec.name))
          by_tensor[p->unsafeGetTensorImpl()] = spec;
  };
  // Itself apart: named_modules(include_self) needs a module owned by a
  // shared_ptr, and a caller's may live on the stack.
  add(module);
  for (const auto& item : module.named_modules("", /*include_self=*/false)) add(*item.value());
  std::map<std::string, ShardSpec> out;
  for (const auto& [name, param] : parameters)
    if (auto it = by_tensor.find(param.unsafeGetTensorImpl()); it != by_tensor.end())
      out[name] = it->second;
  return out;
}

namespace {

// This rank's slice of `whole` (any tensor shaped like the whole parameter).
Tensor slice_of(const Tensor& whole, const ShardSpec* spec) {
  if (!spec) return whole;
  auto [begin, length] = shard_range(spec->full_size, spec->group.rank(), spec->group.size());
  return whole.narrow(spec->dim, begin, length);
}

std::vector<int64_t> whole_shape(const Tensor& param, const ShardSpec* spec) {
  auto shape = param.sizes().vec();
  if (spec) shape[spec->dim] = spec->full_size;
  return shape;
}

}  // namespace

void take_slices(const NamedTensors& whole, const ModelParts& parts, const StateMap& whole_state,
                 ::torch::optim::Optimizer& optimizer) {
  ::torch::NoGradGuard no_grad;
  optimizer.state().clear();
  for (const auto& [name, param] : parts.parameters) {
    auto it = parts.shards.find(name);
    const ShardSpec* spec = it == parts.shards.end() ? nullptr : &it->second;
    const Tensor full = whole.get(name);
    if (full.sizes().vec() != whole_shape(param, spec))
      throw Error(fmt::format("model checkpoint: '{}' is {} in the file but {} in this model", name,
                              c10::str(full.sizes()),
                              c10::str(c10::IntArrayRef(whole_shape(param, spec)))));
    param.detach().copy_(slice_of(full, spec));
    auto state = whole_state.find(state_key(full));
    if (state == whole_state.end()) continue;
    StateValues values = state_values(*state->second);
    for (auto& [key, value] : values)
      if (value.isTensor() && value.toTensor().defined() &&
          value.toTensor().sizes().equals(full.sizes()))
        value = slice_of(value.toTensor(), spec).clone();
    optimizer.state()[state_key(param)] = state_from_values(*state->second, values);
  }
  for (const auto& [name, buffer] : parts.buffers) {
    const Tensor full = whole.get(name);
    if (!full.sizes().equals(buffer.sizes()))
      throw Error(fmt::format("model checkpoint: buffer '{}' is {} in the file but {} here", name,
                              c10::str(full.sizes()), c10::str(buffer.sizes())));
    buffer.detach().copy_(full);
  }
}

}  // namespace lockstep::parallel::detail
