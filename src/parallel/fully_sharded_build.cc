// FullyShardedModel's construction: check the model against every rank's,
// lay out the units (Note [FSDP units] in fully_sharded.cc), take rank 0's
// values and keep this rank's segments.
#include <fmt/format.h>

#include <limits>
#include <sstream>

#include "lockstep/base/error.h"
#include "lockstep/torch/objects.h"
#include "parallel/fully_sharded_impl.h"
#include "parallel/gradient_hook.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;

namespace {

std::string describe_parameter(const std::string& name, const Tensor& p, const std::string& unit) {
  std::ostringstream s;
  s << name << " " << p.sizes() << " " << c10::toString(p.scalar_type()) << " in unit " << unit;
  return s.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Every rank must wrap the same model: one line per parameter (and the
// options that change the layout), compared with rank 0's on every rank, so
// all throw together instead of hanging in mismatched collectives.
void check_same_model_everywhere(const std::string& mine, const FullyShardedOptions& o) {
  if (o.group.size() == 1) return;
  const auto all = lt::allgather_bytes(mine, o.name + ".model", o.group.id());
  const auto first = split_lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const auto theirs = split_lines(all[r]);
    size_t i = 0;
    while (i < first.size() && i < theirs.size() && first[i] == theirs[i]) ++i;
    throw InvalidArgument(fmt::format(
        "FullyShardedModel: every rank must wrap the same model; group rank {} has {} where group "
        "rank 0 has {}",
        r, i < theirs.size() ? "'" + theirs[i] + "'" : "nothing more",
        i < first.size() ? "'" + first[i] + "'" : "nothing more"));
  }
}

void validate_fsdp_options(const FullyShardedOptions& o, const ::torch::nn::Sequential& model) {
  if (o.layers_per_unit < 1)
    throw InvalidArgument(
        fmt::format("FullyShardedModel: layers_per_unit={} must be >= 1", o.layers_per_unit));
  if (model->size() == 0) throw InvalidArgument("FullyShardedModel: the Sequential has no layers");
  validate_common_options(o);
}

}  // namespace

void validate_common_options(const FullyShardedOptions& o) {
  o.group.require_member("FullyShardedModel");
  if (o.replicate) o.replicate->require_member("FullyShardedModel (replicate group)");
  if (o.compute_dtype && !c10::isFloatingType(*o.compute_dtype))
    throw InvalidArgument(fmt::format("FullyShardedModel: compute_dtype {} is not a floating type",
                                      c10::toString(*o.compute_dtype)));
  if (o.reduce_dtype && !c10::isFloatingType(*o.reduce_dtype))
    throw InvalidArgument(fmt::format(
        "FullyShardedModel: reduce_dtype {} is not a floating type (kBFloat16 or kHalf compress "
        "the gradient reduce-scatter)",
        c10::toString(*o.reduce_dtype)));
}

std::optional<::torch::ScalarType> fsdp_reduce_dtype(lockstep::torch::Compression compression) {
  using lockstep::torch::Compression;
  switch (compression) {
    case Compression::kNone: return std::nullopt;
    case Compression::kFp16: return ::torch::kHalf;
    case Compression::kBf16: return ::torch::kBFloat16;
    case Compression::kPowerSGD:
    case Compression::kOneBit:
    case Compression::kOneBitAdam:
    case Compression::kOneBitLamb: break;
  }
  const char* scheme = compression == Compression::kPowerSGD     ? "PowerSGD"
                       : compression == Compression::kOneBit     ? "1-bit"
                       : compression == Compression::kOneBitAdam ? "1-bit Adam"
                                                                 : "1-bit LAMB";
  throw InvalidArgument(fmt::format(
      "{} compression does not work with sharding (FullyShardedModel, ShardedOptimizer: it "
      "compresses whole gradients or momenta, and each rank reduces only its segment); use "
      "reduce_dtype = kBFloat16 or kHalf, or DistributedOptimizer with {} on whole replicas",
      scheme, scheme));
}

std::string FullyShardedModel::Impl::layout_line() const {
  return fmt::format("granularity={} compute_dtype={} reduce_dtype={}",
                     element ? "element" : "tensor",
                     options->compute_dtype ? c10::toString(*options->compute_dtype) : "-",
                     options->reduce_dtype ? c10::toString(*options->reduce_dtype) : "-");
}

// Every parameter: contiguous, floating, requiring grad, of the first one's
// dtype and device.
static void check_parameter(FullyShardedModel::Impl& m, const std::string& name, const Tensor& p) {
  if (!p.requires_grad() || !p.is_floating_point() || !p.is_contiguous())
    throw InvalidArgument(fmt::format(
        "FullyShardedModel: parameter {} must be a contiguous floating tensor that requires grad "
        "(freeze layers outside the sharded model)",
        name));
  if (m.params.empty()) {
    m.dtype = p.scalar_type();
    m.device = p.device();
  } else if (p.scalar_type() != m.dtype || p.device() != m.device) {
    throw InvalidArgument(
        fmt::format("FullyShardedModel: parameter {} is {} on {}, {} is {} on {}; "
                    "all must be one dtype on one device",
                    name, c10::toString(p.scalar_type()), p.device().str(), m.names[0],
                    c10::toString(m.dtype), m.device.str()));
  }
}

void FullyShardedModel::Impl::add_parameter(int u, const std::string& name, const Tensor& p,
                                            std::string& description) {
  check_parameter(*this, name, p);
  description += describe_parameter(name, p, units[u].label) + "\n";
  units[u].params.push_back(static_cast<int>(params.size()));
  names.push_back(name);
  params.push_back(p);
  shapes.push_back(p.sizes().vec());
  unit_of.push_back(u);
}

// One bucket of plan_shards over the unit's parameters.
void FullyShardedModel::Impl::lay_out(int u) {
  Unit& unit = units[u];
  if (unit.params.empty()) return;
  std::vector<int64_t> numels;
  for (int p : unit.params) numels.push_back(params[p].numel());
  auto buckets = plan_shards(numels, ::torch::elementSize(dtype),
                             std::numeric_limits<size_t>::max(), n, !element);
  unit.layout = std::move(buckets.at(0));
  for (auto& place : unit.layout.placements) place.param = unit.params[place.param];
  for (auto& p : unit.layout.params) p = unit.params[p];
}

// Units, their layouts and the parameters' checks; the model's description
// for check_same_model_everywhere.
static std::string plan_units(FullyShardedModel::Impl& m, ::torch::nn::Sequential& model,
                              const FullyShardedOptions& o) {
  std::string description =
      fmt::format("layers_per_unit={} {}\n", o.layers_per_unit, m.layout_line());
  const int layers = static_cast<int>(model->size());
  const auto children = model->named_children();  // the names module.named_parameters() uses
  for (int first = 0; first < layers; first += o.layers_per_unit) {
    const int u = static_cast<int>(m.units.size());
    m.units.emplace_back();
    m.units[u].first_layer = first;
    m.units[u].end_layer = std::min(layers, first + o.layers_per_unit);
    m.units[u].label = fmt::format("{} (layers {}..{})", u, first, m.units[u].end_layer - 1);
    m.units[u].tag = fmt::format("{}:layers{}-{}", u, first, m.units[u].end_layer - 1);
    for (int layer = first; layer < m.units[u].end_layer; ++layer)
      for (const auto& item : model->ptr(layer)->named_parameters())
        m.add_parameter(u, fmt::format("{}.{}", children[layer].key(), item.key()), item.value(),
                        description);
    m.lay_out(u);
  }
  if (m.params.empty()) throw InvalidArgument("FullyShardedModel: the model has no parameters");
  return description;
}

// Rank 0's values of unit u, this rank's segment kept, the parameters made
// views of the (then released) full buffer.
static void shard_unit(FullyShardedModel::Impl& m, int u) {
  auto& unit = m.units[u];
  ::torch::NoGradGuard no_grad;
  const auto options = ::torch::TensorOptions().dtype(m.dtype).device(m.device);
  Tensor whole = ::torch::zeros({unit.layout.shard * m.n}, options);
  for (const ShardPlacement& place : unit.layout.placements)
    whole.narrow(0, place.flat_offset, place.length)
        .copy_(m.params[place.param].detach().reshape({-1}).narrow(0, place.param_offset,
                                                                   place.length));
  if (m.n > 1)
    lt::broadcast_(whole, 0, fmt::format("{}.init.{}", m.options->name, u), m.options->group.id());
  Tensor mine = whole.narrow(0, m.me * unit.layout.shard, unit.layout.shard);
  if (m.offload) {
    unit.shard =
        ::torch::empty({unit.layout.shard}, options.device(::torch::kCPU).pinned_memory(true));
    unit.shard.copy_(mine);
    unit.device_shard = mine.clone();
  } else {
    unit.shard = mine.clone();
  }
  unit.full = m.compute == m.dtype ? whole : whole.to(m.compute);
  m.bind_views(u);
  unit.residence = unit.root ? FullyShardedModel::Impl::Residence::kept
                             : FullyShardedModel::Impl::Residence::gathered;
  m.release(u);
}

static void make_pieces(FullyShardedModel::Impl& m) {
  for (auto& unit : m.units)
    for (const ShardPlacement& place : unit.layout.placements) {
      if (unit.params.empty() || unit.layout.owner(place) != m.me) continue;
      Tensor piece =
          unit.shard.narrow(0, place.flat_offset - m.me * unit.layout.shard, place.length);
      if (!m.element) piece = piece.view(m.params[place.param].sizes());
      m.pieces.push_back({place.param, place.param_offset, place.length, piece});
    }
}

void FullyShardedModel::Impl::finish(const std::string& description) {
  check_same_model_everywhere(description, *options);
  offload = options->offload_optimizer && !device.is_cpu();
  compute = options->compute_dtype.value_or(dtype);
  for (int u = 0; u < static_cast<int>(units.size()); ++u)
    if (!units[u].params.empty()) shard_unit(*this, u);
  make_pieces(*this);
  register_hooks();
}

FullyShardedModel::FullyShardedModel(::torch::nn::Sequential model, FullyShardedOptions options)
    : model_(std::move(model)), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  validate_fsdp_options(options_, model_);
  root_ = model_.ptr();
  Impl& m = *impl_;
  m.options = &options_;
  m.n = options_.group.size();
  m.me = options_.group.rank();
  m.element = options_.granularity != ShardGranularity::kTensor;
  m.finish(plan_units(m, model_, options_));
  m.watch_process();
}

void FullyShardedModel::Impl::register_hooks() {
  remove_hooks();
  for (size_t p = 0; p < params.size(); ++p) {
    auto node = ::torch::autograd::impl::grad_accumulator(params[p]);
    if (!node) throw InvalidArgument(fmt::format("FullyShardedModel: {} is not a leaf", names[p]));
    const int param = static_cast<int>(p);
    uintptr_t key = node->add_post_hook(
        std::make_unique<detail::GradientReadyHook>([this, param] { on_gradient(param); }));
    hooks.emplace_back(node, key);
  }
}

void FullyShardedModel::Impl::remove_hooks() {
  for (auto& [node, key] : hooks) node->del_post_hook(key);
  hooks.clear();
}

FullyShardedModel::~FullyShardedModel() {
  impl_->unwatch_process();
  impl_->unbind_unit_modules();
  impl_->remove_hooks();
  for (auto& unit : impl_->units)
    for (auto* handle : {&unit.gathering, &unit.reducing}) {
      try {
        if (handle->valid()) handle->wait();
      } catch (...) {  // the failed step already reported it
      }
    }
}

}  // namespace lockstep::parallel
