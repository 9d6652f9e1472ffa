#include "lockstep/torch/distributed_optimizer.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"
#include "lockstep/engine/elastic.h"
#include "lockstep/torch/fingerprint.h"
#include "lockstep/torch/placement.h"
#include "torch/gradient_schemes.h"
#include "torch/optimizer_names.h"
#include "torch/step_profiler.h"

namespace lockstep::torch {

// A parameter's gradient (what the scheme sees) and the hooks' bookkeeping.
struct DistributedOptimizer::Slot : Gradient {
  std::shared_ptr<::torch::autograd::Node> accumulator;  // keeps the hook's node alive
  uintptr_t hook_key = 0;
  uintptr_t pre_hook_key = 0;
  int passes = 0;          // gradient-ready events in this step
  bool submitted = false;  // the scheme started reducing it (gradient_ready() said so)
  // True from step() until the gradient is seen cleared; `seen` is the
  // gradient as step() (or the last firing) left it. Note [Gradients after step()]
  bool after_step = false;
  const void* seen_impl = nullptr;
  int64_t seen_version = 0;
  int profile_id = -1;  // LOCKSTEP_PROFILE's index of this gradient
};

namespace {

// Fires before AccumulateGrad adds into the parameter's gradient.
class GradientArrivingHook : public ::torch::autograd::FunctionPreHook {
 public:
  explicit GradientArrivingHook(std::function<void()> arriving) : arriving_(std::move(arriving)) {}
  ::torch::autograd::variable_list operator()(
      const ::torch::autograd::variable_list& grads) override {
    arriving_();
    return grads;
  }

 private:
  std::function<void()> arriving_;
};

// Fires after AccumulateGrad wrote the parameter's gradient.
class GradientReadyHook : public ::torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> ready) : ready_(std::move(ready)) {}
  ::torch::autograd::variable_list operator()(
      const ::torch::autograd::variable_list& outputs,
      const ::torch::autograd::variable_list& /*inputs*/) override {
    ready_();
    return outputs;
  }

 private:
  std::function<void()> ready_;
};

const char* profile_dtype(::torch::ScalarType t) {
  switch (t) {
    case ::torch::kFloat16: return "f16";
    case ::torch::kBFloat16: return "bf16";
    case ::torch::kFloat64: return "f64";
    default: return "f32";
  }
}

// backward_passes_per_step = k with step() after fewer passes reduces and
// applies every pass: no accumulation, k times the communication; it was
// accepted silently. Said once per process.
void warn_early_step(int passes, int k) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  log(LogLevel::kWarning,
      "DistributedOptimizer: step() after {} backward pass(es) but backward_passes_per_step={}: "
      "gradients are reduced and applied now, not accumulated over {} passes; call step() (and "
      "zero_grad()) once every {} passes",
      passes, k, k, k);
}

// The same program fails with overlap on (on_gradient_ready): said once, so
// that a job does not depend on what LOCKSTEP_OVERLAP=auto picks.
void warn_extra_passes(int passes, int k) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  log(LogLevel::kWarning,
      "DistributedOptimizer: step() after {} backward passes but backward_passes_per_step={}: "
      "their sum is reduced once; with overlap on (LOCKSTEP_OVERLAP=on, or auto across hosts or "
      "with a spare core) this is an error. Set backward_passes_per_step={}",
      passes, k, passes);
}

// Off by default in elastic jobs: a worker that joins later counts its steps
// from 0 while the others do not, so their checks would not line up.
int64_t fingerprint_interval(const DistributedOptimizerOptions& o) {
  if (o.fingerprint_every < 0 && engine::elastic_enabled()) return 0;
  const int64_t every =
      o.fingerprint_every >= 0 ? o.fingerprint_every : knob_int("LOCKSTEP_FINGERPRINT_EVERY");
  if (every < 0)
    throw InvalidArgument(
        fmt::format("LOCKSTEP_FINGERPRINT_EVERY={} must be >= 0 (0 turns the check off)", every));
  return every;
}

// What every scheme relies on. Each scheme's factory checks the options that
// are its own (gradient_schemes.h), once, when the optimizer is made.
void validate(const DistributedOptimizerOptions& o) {
  if (o.op != ReduceOp::kAverage && o.op != ReduceOp::kSum)
    throw InvalidArgument("DistributedOptimizer: op must be kAverage or kSum");
  if (o.backward_passes_per_step < 1)
    throw InvalidArgument(
        fmt::format("DistributedOptimizer: backward_passes_per_step={} must be >= 1",
                    o.backward_passes_per_step));
  if (!(o.gradient_predivide_factor > 0))
    throw InvalidArgument("DistributedOptimizer: gradient_predivide_factor must be > 0");
  if (o.gradient_predivide_factor != 1.0 && o.op != ReduceOp::kAverage)
    throw InvalidArgument("DistributedOptimizer: gradient_predivide_factor needs op kAverage");
}

// Overlap pays when communication runs on resources backward leaves idle: a
// network, or a spare core. Shared-memory transfers are CPU work, so with
// every core of this worker computing, overlapping only time-slices the
// core between backward and the engine's thread (measured on 2 cores,
// 2 workers: ~5% fewer samples/s than one fused allreduce per step).
bool decide_overlap(Overlap requested, const Group& group) {
  const detail::OverlapChoice c = detail::resolve_overlap(requested, group.size());
  if (*c.why == '\0') return c.overlap;
  static std::once_flag logged;
  std::call_once(logged, [&] {
    if (rank() == 0)
      log(LogLevel::kInfo,
          "DistributedOptimizer: gradient allreduce {} (LOCKSTEP_OVERLAP=auto: {}; set on/off "
          "to choose)",
          c.overlap ? "overlaps backward" : "runs once per step, fused", c.why);
  });
  return c.overlap;
}

}  // namespace

detail::OverlapChoice detail::resolve_overlap(Overlap requested, int group_size) {
  // The option wins over the variable; either goes to the one rule.
  const policy::OverlapMode mode =
      requested == Overlap::kOn ? policy::OverlapMode::kOn
      : requested == Overlap::kOff
          ? policy::OverlapMode::kOff
          : policy::parse_overlap(knob_string("LOCKSTEP_OVERLAP"), "LOCKSTEP_OVERLAP");
  return policy::choose_overlap(mode, group_size, local_size() == size(),
                                worker_cpu_count(local_size()), ::at::get_num_threads());
}

namespace {

DistributedOptimizer::NamedParameters named_parameters_of(const ::torch::nn::Module& module) {
  DistributedOptimizer::NamedParameters named;
  for (const auto& item : module.named_parameters()) named.emplace_back(item.key(), item.value());
  return named;
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           NamedParameters named,
                                           DistributedOptimizerOptions options)
    : optimizer_(optimizer),
      options_(std::move(options)),
      overlap_(decide_overlap(options_.overlap, options_.group)) {
  validate(options_);
  detail::init_step_profiler();
  options_.group.require_member("DistributedOptimizer");
  fingerprint_every_ = fingerprint_interval(options_);
  detail::check_parameter_names(optimizer_, named);  // repeats hang, omissions never average
  int trainable = 0;
  for (const auto& item : named) trainable += item.second.requires_grad() ? 1 : 0;
  // Chosen once, here, before any hook exists: a scheme that refuses the
  // optimizer or an option leaves nothing behind.
  scheme_ = detail::make_gradient_scheme({optimizer_, options_, trainable});
  for (auto& [name, param] : named)
    if (param.requires_grad()) add_slot(name, param);
}

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           const ::torch::nn::Module& module,
                                           DistributedOptimizerOptions options)
    : DistributedOptimizer(optimizer, named_parameters_of(module), std::move(options)) {}

DistributedOptimizer::~DistributedOptimizer() {
  detail::profile_detach(this);
  for (auto& slot : slots_) {
    if (!slot->accumulator) continue;
    slot->accumulator->del_post_hook(slot->hook_key);
    auto& pre = slot->accumulator->pre_hooks();
    pre.erase(std::remove_if(pre.begin(), pre.end(),
                             [&](const auto& h) {
                               return reinterpret_cast<uintptr_t>(h.get()) == slot->pre_hook_key;
                             }),
              pre.end());
  }
  // Never leave an operation reading a gradient that may be freed.
  reset();
}

void DistributedOptimizer::reset() noexcept {
  scheme_->reset();
  for (auto& slot : slots_) {
    slot->submitted = false;
    slot->passes = 0;
    slot->after_step = false;
  }
  synchronized_ = false;
}

// Note [Gradients after step()]
// PyTorch's GAN loop runs the generator's backward through the discriminator
// after D's step(): it adds into D's .grad, and D's next zero_grad() drops
// it. Reduced as it arrives (overlap), that leftover would start an
// allreduce D never waits for, racing the zero_grad() and refusing D's next
// pass. So a gradient that arrives onto the one step() applied, unchanged
// (same tensor, same version counter), is only counted: if step() comes
// first, synchronize() reduces whatever .grad then holds, as without
// overlap. A gradient cleared since (zero_grad() here, on the wrapped
// optimizer or the module, in place or set to none) starts a new step.
namespace {

void remember_gradient(DistributedOptimizer::Slot& slot) {
  const ::torch::Tensor& grad = slot.param.grad();
  slot.seen_impl = grad.defined() ? grad.unsafeGetTensorImpl() : nullptr;
  slot.seen_version = grad.defined() ? grad._version() : 0;
}

void on_gradient_arriving(DistributedOptimizer::Slot& slot) {
  if (!slot.after_step) return;
  const ::torch::Tensor& grad = slot.param.grad();
  if (grad.defined() && grad.unsafeGetTensorImpl() == slot.seen_impl &&
      grad._version() == slot.seen_version)
    return;  // accumulates onto what step() applied: stays counted only
  slot.after_step = false;
  slot.passes = 0;
}

}  // namespace

void DistributedOptimizer::add_slot(std::string name, const ::torch::Tensor& param) {
  auto slot = std::make_unique<Slot>();
  slot->index = static_cast<int>(slots_.size());
  slot->name = options_.name_prefix + "." + name;
  slot->param = param;
  slot->accumulator = ::torch::autograd::impl::grad_accumulator(param);
  if (!slot->accumulator)
    throw InvalidArgument(fmt::format(
        "DistributedOptimizer: parameter {} is not a leaf tensor requiring grad", name));
  slot->profile_id = detail::profile_add_gradient(
      this, slot->name, param.numel() * param.element_size(), profile_dtype(param.scalar_type()),
      overlap_, param.sizes().vec());
  Slot* raw = slot.get();
  slot->hook_key = slot->accumulator->add_post_hook(
      std::make_unique<GradientReadyHook>([this, raw] { on_gradient_ready(*raw); }));
  auto pre = std::make_unique<GradientArrivingHook>([raw] { on_gradient_arriving(*raw); });
  slot->pre_hook_key = reinterpret_cast<uintptr_t>(pre.get());
  slot->accumulator->add_pre_hook(std::move(pre));
  gradients_.push_back(slot.get());
  slots_.push_back(std::move(slot));
}

void DistributedOptimizer::on_gradient_ready(Slot& slot) {
  detail::profile_gradient_ready(this, slot.profile_id);
  synchronized_ = false;
  if (slot.after_step) {
    ++slot.passes;
    remember_gradient(slot);
    return;
  }
  if (slot.submitted) {
    const int k = options_.backward_passes_per_step;
    throw InvalidArgument(fmt::format(
        "DistributedOptimizer: gradient of {} produced by backward pass {} since the last "
        "zero_grad()/step(), but its allreduce started after pass {} (backward_passes_per_step={}, "
        "overlap on). If this optimizer's step() follows {} backward passes (a GAN "
        "discriminator's real and fake losses), set backward_passes_per_step={} or sum the losses "
        "into one backward; if another model's backward runs through these parameters, call this "
        "optimizer's step() first or set requires_grad_(false) on them around it",
        slot.name, k + 1, k, k, k + 1, k + 1));
  }
  if (++slot.passes == options_.backward_passes_per_step && overlap_ && options_.group.size() > 1)
    slot.submitted = scheme_->gradient_ready(slot);
}

void DistributedOptimizer::synchronize() {
  detail::profile_sync_begin(this);
  if (options_.group.size() > 1) scheme_->synchronize(gradients_);  // one rank's is its own
  for (auto& slot : slots_) {
    slot->submitted = false;
    slot->passes = 0;
  }
  synchronized_ = true;
  detail::profile_sync_end(this);
}

void DistributedOptimizer::step() {
  int passes = 0;
  for (const auto& slot : slots_) passes = std::max(passes, slot->passes);
  if (passes > 0 && passes < options_.backward_passes_per_step)
    warn_early_step(passes, options_.backward_passes_per_step);
  if (passes > options_.backward_passes_per_step)
    warn_extra_passes(passes, options_.backward_passes_per_step);
  if (!synchronized_) synchronize();
  check_fingerprint_if_due();
  scheme_->step(optimizer_);
  ++steps_;
  synchronized_ = false;
  for (auto& slot : slots_) {  // Note [Gradients after step()]
    slot->after_step = true;
    remember_gradient(*slot);
  }
  detail::profile_step_end(this);
}

// At the first step rather than in the constructor: programs (the README's
// too) may broadcast the parameters after wrapping the optimizer.
void DistributedOptimizer::check_fingerprint_if_due() {
  if (fingerprint_every_ == 0 || options_.group.size() == 1 || steps_ % fingerprint_every_ != 0)
    return;
  NamedParameters named;
  named.reserve(slots_.size());
  const size_t prefix = options_.name_prefix.size() + 1;
  for (const auto& slot : slots_) named.emplace_back(slot->name.substr(prefix), slot->param);
  // Over the optimizer's group only: ranks of other tensor-parallel shards or
  // pipeline stages legitimately hold different parameters.
  check_parameters_agree(
      named, steps_ == 0 ? "at the first step" : fmt::format("at step {}", steps_), options_.group);
}

// Waits for allreduces still writing a gradient (zero_grad() between backward
// and step()) before zeroing it, and forgets them: the next pass starts a step.
void DistributedOptimizer::zero_grad() {
  detail::profile_zero_grad(this);
  scheme_->discard();
  for (auto& slot : slots_) {
    slot->submitted = false;
    slot->passes = 0;
    slot->after_step = false;
  }
  optimizer_.zero_grad();
  synchronized_ = false;
}

}  // namespace lockstep::torch
