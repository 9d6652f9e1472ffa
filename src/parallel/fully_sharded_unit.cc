// FullyShardedModel over your own module: the FullyShardedUnit wrapper, the
// units found in the model (Note [FSDP units] in fully_sharded.cc; the root
// unit in fully_sharded.h) and the constructor that shards them.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "lockstep/base/error.h"
#include "parallel/wrapped_names.h"
#include "parallel/fully_sharded_impl.h"

namespace lockstep::parallel {

using ::torch::Tensor;

FullyShardedUnitImpl::FullyShardedUnitImpl(::torch::nn::AnyModule module)
    : FullyShardedUnitImpl(module.is_empty() ? nullptr : module.ptr(),
                           [module](const Tensor& x) mutable { return module.forward(x); }) {}

FullyShardedUnitImpl::FullyShardedUnitImpl(::torch::nn::Sequential module)
    : FullyShardedUnitImpl(module.ptr(),
                           [module](const Tensor& x) mutable { return module->forward(x); }) {}

FullyShardedUnitImpl::FullyShardedUnitImpl(std::shared_ptr<::torch::nn::Module> module,
                                           SegmentForward forward)
    : module_(std::move(module)), forward_(std::move(forward)) {
  if (!module_ || !forward_) throw InvalidArgument("FullyShardedUnit: no module given");
  detail::adopt_names(*this, *module_);  // the wrapped module's names, one level up
}

Tensor FullyShardedUnitImpl::forward(const Tensor& input) {
  if (owner_ == nullptr) return forward_(input);
  owner_->enter(unit_);
  // Mixed precision: the unit computes in compute_dtype and hands its output
  // on in it (the next unit's and the root's parameters are in it too).
  Tensor out;
  try {
    out = forward_(owner_->to_compute(input));
  } catch (const c10::Error&) {
    owner_->explain_layer_error(fmt::format("the forward of unit {}", owner_->units[unit_].label));
  }
  return owner_->leave(unit_, std::move(out));
}

void FullyShardedUnitImpl::train(bool on) {
  ::torch::nn::Module::train(on);
  module_->train(on);
}

void FullyShardedUnitImpl::pretty_print(std::ostream& stream) const {
  stream << "lockstep::parallel::FullyShardedUnit(";
  module_->pretty_print(stream);
  stream << ")";
}

void FullyShardedModel::Impl::bind_unit_modules() {
  for (size_t u = 0; u < unit_modules.size(); ++u) {
    unit_modules[u]->owner_ = this;
    unit_modules[u]->unit_ = static_cast<int>(u);
  }
}

void FullyShardedModel::Impl::unbind_unit_modules() {
  for (auto& unit : unit_modules) unit->owner_ = nullptr;
}

namespace {

// A FullyShardedUnit submodule and every path it is registered under.
struct FoundUnit {
  std::vector<std::string> paths;
  std::shared_ptr<FullyShardedUnitImpl> module;

  bool contains(const std::string& parameter_name) const {
    for (const auto& path : paths)
      if (path.empty() || parameter_name.rfind(path + ".", 0) == 0) return true;
    return false;
  }
};

// The model's FullyShardedUnit submodules in named_modules() order (each
// once); nested units are refused.
std::vector<FoundUnit> find_units(::torch::nn::Module& model) {
  std::vector<FoundUnit> found;
  for (const auto& item : model.named_modules()) {
    auto unit = std::dynamic_pointer_cast<FullyShardedUnitImpl>(item.value());
    if (!unit) continue;
    auto same = std::find_if(found.begin(), found.end(),
                             [&](const FoundUnit& f) { return f.module == unit; });
    if (same != found.end()) {
      same->paths.push_back(item.key());
      continue;
    }
    for (const auto& inner : unit->named_modules("", /*include_self=*/false))
      if (std::dynamic_pointer_cast<FullyShardedUnitImpl>(inner.value()))
        throw InvalidArgument(fmt::format(
            "FullyShardedModel: unit '{}' contains another FullyShardedUnit ('{}.{}'); nested "
            "units are not supported",
            item.key(), item.key(), inner.key()));
    if (unit->sharded())
      throw InvalidArgument(fmt::format(
          "FullyShardedModel: unit '{}' already belongs to another FullyShardedModel", item.key()));
    found.push_back({{item.key()}, std::move(unit)});
  }
  if (found.empty())
    throw InvalidArgument(
        "FullyShardedModel: the module has no FullyShardedUnit submodule; wrap "
        "the layers to shard in lockstep::parallel::fsdp_unit(...)");
  return found;
}

// Each unit's parameters (TensorImpl -> unit); one parameter in two units
// is refused. The units' entries in m.
std::unordered_map<const void*, int> own_parameters(FullyShardedModel::Impl& m,
                                                    const std::vector<FoundUnit>& found) {
  std::unordered_map<const void*, int> owner;
  for (size_t u = 0; u < found.size(); ++u) {
    m.units.emplace_back();
    m.units[u].label = fmt::format("{} ({})", u, found[u].paths[0]);
    m.units[u].tag = fmt::format("{}:{}", u, found[u].paths[0]);
    m.unit_modules.push_back(found[u].module);
    for (const auto& p : found[u].module->named_parameters()) {
      auto [it, fresh] = owner.emplace(p.value().unsafeGetTensorImpl(), static_cast<int>(u));
      if (!fresh)
        throw InvalidArgument(fmt::format(
            "FullyShardedModel: units '{}' and '{}' share the parameter {}; a parameter belongs "
            "to one unit",
            found[it->second].paths[0], found[u].paths[0], p.key()));
    }
  }
  return owner;
}

}  // namespace

// Units in order, then the root unit for the parameters outside every unit;
// parameters in the model's named_parameters() order (what checkpoints and
// an optimizer on the plain model use).
static std::string plan_module_units(FullyShardedModel::Impl& m, ::torch::nn::Module& model,
                                     const std::vector<FoundUnit>& found) {
  const auto owner = own_parameters(m, found);
  std::string description = fmt::format("modules {}\n", m.layout_line());
  const int root = static_cast<int>(found.size());
  std::unordered_set<const void*> taken;  // each parameter once (its first name)
  for (const auto& item : model.named_parameters()) {
    const void* key = item.value().unsafeGetTensorImpl();
    auto it = owner.find(key);
    if (it != owner.end() && !found[it->second].contains(item.key()))
      throw InvalidArgument(fmt::format(
          "FullyShardedModel: {} is a parameter of unit '{}' that is also registered outside it "
          "(tied weights across a unit's boundary are not supported: it holds no memory there)",
          item.key(), found[it->second].paths[0]));
    if (!taken.insert(key).second) continue;
    if (it == owner.end() && static_cast<int>(m.units.size()) == root) {
      m.units.emplace_back();
      m.units[root].label = "root";
      m.units[root].tag = fmt::format("{}:root", root);
      m.units[root].root = true;
      m.units[root].residence = FullyShardedModel::Impl::Residence::kept;
    }
    m.add_parameter(it == owner.end() ? root : it->second, item.key(), item.value(), description);
  }
  for (int u = 0; u < static_cast<int>(m.units.size()); ++u) m.lay_out(u);
  if (m.params.empty()) throw InvalidArgument("FullyShardedModel: the model has no parameters");
  return description;
}

FullyShardedModel::FullyShardedModel(std::shared_ptr<::torch::nn::Module> model,
                                     FullyShardedOptions options)
    : root_(std::move(model)), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  if (!root_) throw InvalidArgument("FullyShardedModel: no model given");
  validate_common_options(options_);
  Impl& m = *impl_;
  m.options = &options_;
  m.n = options_.group.size();
  m.me = options_.group.rank();
  m.element = options_.granularity != ShardGranularity::kTensor;
  m.modules = true;
  const auto found = find_units(*root_);
  m.finish(plan_module_units(m, *root_, found));
  m.bind_unit_modules();
  m.watch_process();
}

}  // namespace lockstep::parallel
