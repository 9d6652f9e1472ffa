#include "lockstep/torch/mixed_precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <fstream>
#include <string>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/distributed_optimizer.h"
#include "lockstep/torch/placement.h"

namespace lockstep::torch {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  throw InvalidArgument(fmt::format("unknown precision '{}': use fp32, bf16 or fp16", name));
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

bool cpu_has_native_bf16() {
  static const bool native = [] {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("flags", 0) == 0)
        return line.find(" avx512_bf16") != std::string::npos ||
               line.find(" amx_bf16") != std::string::npos;
    return false;
  }();
  return native;
}

namespace {

// LibTorch 2.4 made autocast's state per device type; 1.13 has one set of
// functions for the CPU and one for CUDA ("gpu").
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool autocast_enabled(at::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void set_autocast_enabled(at::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
at::ScalarType autocast_dtype(at::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void set_autocast_dtype(at::DeviceType d, at::ScalarType t) {
  at::autocast::set_autocast_dtype(d, t);
}
#else
bool autocast_enabled(at::DeviceType d) {
  return d == at::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void set_autocast_enabled(at::DeviceType d, bool on) {
  d == at::kCUDA ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on);
}
at::ScalarType autocast_dtype(at::DeviceType d) {
  return d == at::kCUDA ? at::autocast::get_autocast_gpu_dtype()
                        : at::autocast::get_autocast_cpu_dtype();
}
void set_autocast_dtype(at::DeviceType d, at::ScalarType t) {
  d == at::kCUDA ? at::autocast::set_autocast_gpu_dtype(t)
                 : at::autocast::set_autocast_cpu_dtype(t);
}
#endif

}  // namespace

AutocastGuard::AutocastGuard(Precision precision)
    : AutocastGuard(precision, placement().torch_device().type()) {}

AutocastGuard::AutocastGuard(Precision precision, ::torch::DeviceType device) : device_(device) {
  // fp16 has no CPU kernels in LibTorch 1.13 (see the header): nothing to cast.
  const bool cuda = device == ::torch::kCUDA;
  if (precision == Precision::kFp32 || (precision == Precision::kFp16 && !cuda)) return;
  active_ = true;
  was_enabled_ = autocast_enabled(device);
  previous_dtype_ = autocast_dtype(device);
  set_autocast_dtype(device,
                     precision == Precision::kFp16 ? ::torch::kFloat16 : ::torch::kBFloat16);
  set_autocast_enabled(device, true);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Casts of the weights are cached for the region; drop them with it.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast_enabled(device_, was_enabled_);
  set_autocast_dtype(device_, previous_dtype_);
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (options_.enabled &&
      !(options_.init_scale > 0 && options_.growth_factor > 1 && options_.backoff_factor > 0 &&
        options_.backoff_factor < 1 && options_.growth_interval > 0 && options_.min_scale > 0))
    throw InvalidArgument(
        "GradScalerOptions: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, "
        "growth_interval > 0 and min_scale > 0");
}

::torch::Tensor GradScaler::scale(const ::torch::Tensor& loss) const {
  return options_.enabled ? loss * scale_ : loss;
}

bool GradScaler::unscale_locally(::torch::optim::Optimizer& optimizer) const {
  std::vector<::torch::Tensor> bad;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      p.mutable_grad().mul_(1.0 / scale_);
      bad.push_back(::torch::isfinite(p.grad()).logical_not().any());
    }
  // One host sync for all parameters instead of one per tensor.
  return bad.empty() || !::torch::stack(bad).any().item<bool>();
}

bool GradScaler::all_ranks_finite(bool local_finite) {
  if (!is_initialized() || size() == 1) return local_finite;
  ::torch::Tensor flag = ::torch::tensor({local_finite ? 0.0f : 1.0f});  // a host scalar
  ::torch::Tensor any_bad =
      allreduce(flag, "lockstep.grad_scaler.found_inf", AllreduceOptions{ReduceOp::kMax});
  return any_bad.item<float>() == 0.0f;
}

bool GradScaler::finish(bool finite) {
  ++steps_;
  if (!finite) {
    ++skipped_;
    growth_tracker_ = 0;
    scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    return false;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    growth_tracker_ = 0;
    scale_ *= options_.growth_factor;
  }
  return true;
}

bool GradScaler::step(DistributedOptimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    ++steps_;
    return true;
  }
  optimizer.synchronize();
  bool finite = all_ranks_finite(unscale_locally(optimizer.optimizer()));
  if (finite) optimizer.step();  // already synchronized: only the wrapped step runs
  return finish(finite);
}

bool GradScaler::step(::torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    ++steps_;
    return true;
  }
  bool finite = all_ranks_finite(unscale_locally(optimizer));
  if (finite) optimizer.step();
  return finish(finite);
}

::torch::Tensor GradScaler::state() const {
  return ::torch::tensor({scale_, double(growth_tracker_), double(steps_), double(skipped_)},
                         ::torch::kFloat64);
}

void GradScaler::load_state(const ::torch::Tensor& state) {
  if (state.numel() != 4 || state.scalar_type() != ::torch::kFloat64)
    throw InvalidArgument("GradScaler::load_state: expected the 4 float64 values state() gives");
  auto s = state.accessor<double, 1>();
  scale_ = s[0];
  growth_tracker_ = int64_t(s[1]);
  steps_ = int64_t(s[2]);
  skipped_ = int64_t(s[3]);
}

}  // namespace lockstep::torch
