#include <fmt/format.h>

#include <atomic>

#include "lockstep/base/error.h"
#include "lockstep/parallel/tensor_parallel.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::parallel {
namespace {

// Layers are constructed in the same order on every rank of a tensor group,
// so a per-process counter gives them the same collective names.
std::string layer_name(const std::string& given) {
  static std::atomic<int> counter{0};
  return given.empty() ? fmt::format("tp{}", counter++) : given;
}

void check_features(const char* what, int64_t in, int64_t out, const Group& group) {
  if (in < 1 || out < 1)
    throw InvalidArgument(
        fmt::format("{}: in_features={} and out_features={} must be >= 1", what, in, out));
  group.require_member(what);
}

// The dense layer's initial values: torch::nn::Linear(in, out) drawn from the
// default generator exactly as the dense model would draw them.
::torch::nn::Linear dense_linear(int64_t in, int64_t out, bool bias) {
  ::torch::NoGradGuard no_grad;
  return ::torch::nn::Linear(::torch::nn::LinearOptions(in, out).bias(bias));
}

}  // namespace

// ---- ColumnParallelLinear

ColumnParallelLinearImpl::ColumnParallelLinearImpl(ColumnParallelLinearOptions options_)
    : options(std::move(options_)), name_(layer_name(options.name)) {
  check_features("ColumnParallelLinear", options.in_features, options.out_features, options.group);
  reset();
}

void ColumnParallelLinearImpl::reset() {
  std::tie(out_begin, out_local) =
      shard_range(options.out_features, options.group.rank(), options.group.size());
  auto dense = dense_linear(options.in_features, options.out_features, options.bias);
  weight =
      register_parameter("weight", dense->weight.detach().narrow(0, out_begin, out_local).clone());
  if (options.bias)
    bias = register_parameter("bias", dense->bias.detach().narrow(0, out_begin, out_local).clone());
}

::torch::Tensor ColumnParallelLinearImpl::forward(const ::torch::Tensor& x) {
  auto y =
      ::torch::nn::functional::linear(copy_to_group(x, options.group, name_ + ".in"), weight, bias);
  return options.gather_output ? gather_from_group(y, options.group, name_ + ".out") : y;
}

std::vector<ShardSpec> ColumnParallelLinearImpl::shard_specs() const {
  std::vector<ShardSpec> specs{{"weight", 0, options.out_features, options.group}};
  if (options.bias) specs.push_back({"bias", 0, options.out_features, options.group});
  return specs;
}

// ---- RowParallelLinear

RowParallelLinearImpl::RowParallelLinearImpl(RowParallelLinearOptions options_)
    : options(std::move(options_)), name_(layer_name(options.name)) {
  check_features("RowParallelLinear", options.in_features, options.out_features, options.group);
  reset();
}

void RowParallelLinearImpl::reset() {
  std::tie(in_begin, in_local) =
      shard_range(options.in_features, options.group.rank(), options.group.size());
  auto dense = dense_linear(options.in_features, options.out_features, options.bias);
  weight =
      register_parameter("weight", dense->weight.detach().narrow(1, in_begin, in_local).clone());
  if (options.bias) bias = register_parameter("bias", dense->bias.detach().clone());
}

::torch::Tensor RowParallelLinearImpl::forward(const ::torch::Tensor& x) {
  auto input = options.input_is_parallel ? x : scatter_to_group(x, options.group, name_ + ".in");
  if (input.size(-1) != in_local)
    throw InvalidArgument(fmt::format(
        "RowParallelLinear {}: input has {} features in its last dim but this rank holds {} of "
        "{} (input_is_parallel={})",
        name_, input.size(-1), in_local, options.in_features, options.input_is_parallel));
  auto y = reduce_from_group(::torch::nn::functional::linear(input, weight), options.group,
                             name_ + ".out");
  return options.bias ? y + bias : y;
}

std::vector<ShardSpec> RowParallelLinearImpl::shard_specs() const {
  return {{"weight", 1, options.in_features, options.group}};
}

// ---- ParallelMLP

ParallelMLPImpl::ParallelMLPImpl(ParallelMLPOptions options_) : options(std::move(options_)) {
  reset();
}

void ParallelMLPImpl::reset() {
  const std::string base = options.name.empty() ? layer_name("") : options.name;
  ColumnParallelLinearOptions first(options.in_features, options.hidden_features);
  first.bias = options.bias;
  first.group = options.group;
  first.name = base + ".fc1";
  RowParallelLinearOptions second(options.hidden_features, options.out_features);
  second.bias = options.bias;
  second.group = options.group;
  second.name = base + ".fc2";
  fc1 = register_module("fc1", ColumnParallelLinear(first));
  fc2 = register_module("fc2", RowParallelLinear(second));
}

::torch::Tensor ParallelMLPImpl::forward(const ::torch::Tensor& x) {
  auto h = fc1->forward(x);
  h = options.activation ? options.activation(h) : ::torch::relu(h);
  return fc2->forward(h);
}

// ---- full (unsharded) state

namespace {

::torch::Tensor gather_along(const ::torch::Tensor& shard, const ShardSpec& spec,
                             const std::string& name) {
  namespace lt = lockstep::torch;
  if (spec.group.size() == 1) return shard.detach().clone();
  auto front = shard.detach().movedim(spec.dim, 0).contiguous();
  return lt::allgather(front, "full_state." + name, spec.group.id()).movedim(0, spec.dim);
}

}  // namespace

std::vector<std::pair<std::string, ::torch::Tensor>> full_state_dict(::torch::nn::Module& module) {
  std::map<std::string, std::pair<const ShardedModule*, ShardSpec>> sharded;
  for (const auto& item : module.named_modules())
    if (auto* s = dynamic_cast<const ShardedModule*>(item.value().get()))
      for (const ShardSpec& spec : s->shard_specs())
        sharded[item.key().empty() ? spec.name : item.key() + "." + spec.name] = {s, spec};
  std::vector<std::pair<std::string, ::torch::Tensor>> out;
  for (const auto& item : module.named_parameters()) {
    auto it = sharded.find(item.key());
    out.emplace_back(item.key(), it == sharded.end()
                                     ? item.value().detach().clone()
                                     : gather_along(item.value(), it->second.second, item.key()));
  }
  for (const auto& item : module.named_buffers())
    out.emplace_back(item.key(), item.value().detach().clone());
  return out;
}

void load_full_state_dict(::torch::nn::Module& module,
                          const std::vector<std::pair<std::string, ::torch::Tensor>>& state) {
  std::map<std::string, ::torch::Tensor> by_name(state.begin(), state.end());
  std::map<std::string, ShardSpec> sharded;
  for (const auto& item : module.named_modules())
    if (auto* s = dynamic_cast<const ShardedModule*>(item.value().get()))
      for (const ShardSpec& spec : s->shard_specs())
        sharded[item.key().empty() ? spec.name : item.key() + "." + spec.name] = spec;
  ::torch::NoGradGuard no_grad;
  auto assign = [&](const std::string& name, ::torch::Tensor target) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw Error(fmt::format("load_full_state_dict: no tensor named '{}' in the state", name));
    ::torch::Tensor source = it->second;
    auto spec = sharded.find(name);
    if (spec != sharded.end()) {
      auto [begin, length] =
          shard_range(spec->second.full_size, spec->second.group.rank(), spec->second.group.size());
      if (source.dim() <= spec->second.dim ||
          source.size(spec->second.dim) != spec->second.full_size)
        throw Error(
            fmt::format("load_full_state_dict: '{}' has shape {} but the full tensor has "
                        "{} entries along dim {}",
                        name, c10::str(source.sizes()), spec->second.full_size, spec->second.dim));
      source = source.narrow(spec->second.dim, begin, length);
    }
    if (!source.sizes().equals(target.sizes()))
      throw Error(fmt::format("load_full_state_dict: '{}' has shape {} but the model expects {}",
                              name, c10::str(source.sizes()), c10::str(target.sizes())));
    target.copy_(source);
  };
  for (const auto& item : module.named_parameters()) assign(item.key(), item.value());
  for (const auto& item : module.named_buffers()) assign(item.key(), item.value());
}

}  // namespace lockstep::parallel
