#include "torch/gradient_schemes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/base/mutex.h"
#include "lockstep/policy/compression.h"

namespace lockstep::torch {
namespace {

struct SchemeEntry {
  std::string name;
  GradientSchemeFactory factory;
};

// The built-in schemes: adding one is a line here (and its file).
const std::vector<SchemeEntry>& built_in_schemes() {
  static const std::vector<SchemeEntry> schemes = {
      {"allreduce", detail::make_allreduce_scheme},
      {"adasum", detail::make_adasum_scheme},
      {"powersgd", detail::make_powersgd_scheme},
      {"onebit", detail::make_onebit_scheme},
      {"onebit-adam", detail::make_onebit_adam_scheme},
      {"onebit-lamb", detail::make_onebit_lamb_scheme},
  };
  return schemes;
}

struct SchemeRegistry {
  Mutex mutex;
  std::vector<SchemeEntry> schemes LOCKSTEP_GUARDED_BY(mutex);
};

SchemeRegistry& scheme_registry() {
  static SchemeRegistry r;
  return r;
}

const SchemeEntry* find_scheme(const std::vector<SchemeEntry>& entries, const std::string& name) {
  for (const SchemeEntry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace

::torch::Tensor& dense_gradient(const Gradient& gradient) {
  ::torch::NoGradGuard no_grad;
  ::torch::Tensor& grad = gradient.param.mutable_grad();
  if (!grad.defined()) grad = ::torch::zeros_like(gradient.param);  // contributes zeros
  // Every scheme sums or compresses dense tensors in place, and ranks'
  // index sets differ.
  if (grad.is_sparse()) grad = grad.to_dense();
  return grad;
}

bool GradientScheme::gradient_ready(Gradient& /*gradient*/) { return false; }

void GradientScheme::step(::torch::optim::Optimizer& optimizer) { optimizer.step(); }

void register_gradient_scheme(std::string name, GradientSchemeFactory factory) {
  if (name.empty()) throw InvalidArgument("register_gradient_scheme: the name is empty");
  if (!factory)
    throw InvalidArgument(
        fmt::format("register_gradient_scheme('{}'): the factory is empty", name));
  SchemeRegistry& r = scheme_registry();
  MutexLock lock(r.mutex);
  if (find_scheme(built_in_schemes(), name) || find_scheme(r.schemes, name))
    throw InvalidArgument(fmt::format(
        "register_gradient_scheme: a scheme named '{}' exists already; pick another name", name));
  r.schemes.push_back({std::move(name), std::move(factory)});
}

std::vector<std::string> gradient_scheme_names() {
  std::vector<std::string> names;
  for (const SchemeEntry& e : built_in_schemes()) names.push_back(e.name);
  SchemeRegistry& r = scheme_registry();
  MutexLock lock(r.mutex);
  for (const SchemeEntry& e : r.schemes) names.push_back(e.name);
  return names;
}

void set_compression(DistributedOptimizerOptions& o, std::string_view name) {
  const policy::CompressionSpec spec = policy::parse_compression(name);
  switch (spec.kind) {
    case policy::CompressionKind::kNone: o.compression = Compression::kNone; break;
    case policy::CompressionKind::kFp16: o.compression = Compression::kFp16; break;
    case policy::CompressionKind::kBf16: o.compression = Compression::kBf16; break;
    case policy::CompressionKind::kPowerSGD:
      o.compression = Compression::kPowerSGD;
      o.powersgd.rank = spec.rank;
      break;
    case policy::CompressionKind::kOneBit: o.compression = Compression::kOneBit; break;
    case policy::CompressionKind::kOneBitAdam: o.compression = Compression::kOneBitAdam; break;
    case policy::CompressionKind::kOneBitLamb: o.compression = Compression::kOneBitLamb; break;
  }
}

}  // namespace lockstep::torch

namespace lockstep::torch::detail {

policy::CompressionKind compression_kind(Compression c) {
  switch (c) {
    case Compression::kNone: return policy::CompressionKind::kNone;
    case Compression::kFp16: return policy::CompressionKind::kFp16;
    case Compression::kBf16: return policy::CompressionKind::kBf16;
    case Compression::kPowerSGD: return policy::CompressionKind::kPowerSGD;
    case Compression::kOneBit: return policy::CompressionKind::kOneBit;
    case Compression::kOneBitAdam: return policy::CompressionKind::kOneBitAdam;
    case Compression::kOneBitLamb: return policy::CompressionKind::kOneBitLamb;
  }
  throw InvalidArgument(
      fmt::format("DistributedOptimizer: unknown compression {}", static_cast<int>(c)));
}

std::string scheme_name(const DistributedOptimizerOptions& o) {
  if (!o.scheme.empty()) {
    if (o.adasum || o.compression != Compression::kNone)
      throw InvalidArgument(fmt::format(
          "DistributedOptimizer: scheme '{}' is set, and so is {}; the scheme decides how "
          "gradients travel: drop one",
          o.scheme, o.adasum ? "adasum" : "compression"));
    return o.scheme;
  }
  if (o.adasum) return "adasum";
  switch (o.compression) {
    case Compression::kPowerSGD: return "powersgd";
    case Compression::kOneBit: return "onebit";
    case Compression::kOneBitAdam: return "onebit-adam";
    case Compression::kOneBitLamb: return "onebit-lamb";
    default: return "allreduce";  // kNone, kFp16, kBf16: a cast on the wire
  }
}

std::unique_ptr<GradientScheme> make_gradient_scheme(const GradientSchemeContext& context) {
  const std::string name = scheme_name(context.options);
  if (const SchemeEntry* e = find_scheme(built_in_schemes(), name)) return e->factory(context);
  GradientSchemeFactory factory;
  {
    SchemeRegistry& r = scheme_registry();
    MutexLock lock(r.mutex);
    if (const SchemeEntry* e = find_scheme(r.schemes, name)) factory = e->factory;
  }
  if (!factory)
    throw InvalidArgument(fmt::format(
        "DistributedOptimizer: no gradient scheme named '{}' (known: {}); register it with "
        "register_gradient_scheme() before constructing the optimizer",
        name, fmt::join(gradient_scheme_names(), ", ")));
  std::unique_ptr<GradientScheme> scheme = factory(context);
  if (!scheme)
    throw InvalidArgument(
        fmt::format("DistributedOptimizer: scheme '{}''s factory returned null", name));
  return scheme;
}

void refuse_predivide(const DistributedOptimizerOptions& o, const char* scheme) {
  if (o.gradient_predivide_factor != 1.0)
    throw InvalidArgument(
        fmt::format("DistributedOptimizer: {} does not take gradient_predivide_factor", scheme));
}

}  // namespace lockstep::torch::detail
