#include "lockstep/torch/distributed_optimizer.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"
#include "lockstep/engine/elastic.h"
#include "lockstep/torch/adasum.h"
#include "lockstep/torch/compression.h"
#include "lockstep/torch/fingerprint.h"
#include "lockstep/torch/placement.h"
#include "torch/gradient_reducers.h"
#include "torch/optimizer_names.h"
#include "torch/step_profiler.h"

namespace lockstep::torch {

struct DistributedOptimizer::Slot {
  std::string name;
  ::torch::Tensor param;
  std::shared_ptr<::torch::autograd::Node> accumulator;  // keeps the hook's node alive
  uintptr_t hook_key = 0;
  uintptr_t pre_hook_key = 0;
  int passes = 0;          // gradient-ready events in this step
  bool submitted = false;
  // Note [Gradients after step()]: true from step() until the gradient is
  // seen cleared; `seen` is the gradient as step() (or the last firing) left it.
  bool after_step = false;
  const void* seen_impl = nullptr;
  int64_t seen_version = 0;
  TensorHandle handle;
  ::torch::Tensor wire;    // compressed copy on the wire (compression only)
  Compressor::Context wire_context;
  int profile_id = -1;     // LOCKSTEP_PROFILE's index of this gradient
};

namespace {

// Fires before AccumulateGrad adds into the parameter's gradient.
class GradientArrivingHook : public ::torch::autograd::FunctionPreHook {
 public:
  explicit GradientArrivingHook(std::function<void()> arriving) : arriving_(std::move(arriving)) {}
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& grads) override {
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
      "zero_grad()) once every {} passes", passes, k, k, k);
}

// The same program fails with overlap on (on_gradient_ready): said once, so
// that a job does not depend on what LOCKSTEP_OVERLAP=auto picks.
void warn_extra_passes(int passes, int k) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  log(LogLevel::kWarning,
      "DistributedOptimizer: step() after {} backward passes but backward_passes_per_step={}: "
      "their sum is reduced once; with overlap on (LOCKSTEP_OVERLAP=on, or auto across hosts or "
      "with a spare core) this is an error. Set backward_passes_per_step={}", passes, k, passes);
}

// Off by default in elastic jobs: a worker that joins later counts its steps
// from 0 while the others do not, so their checks would not line up.
int64_t fingerprint_interval(const DistributedOptimizerOptions& o) {
  if (o.fingerprint_every < 0 && engine::elastic_enabled()) return 0;
  const int64_t every = o.fingerprint_every >= 0 ? o.fingerprint_every
                                                 : knob_int("LOCKSTEP_FINGERPRINT_EVERY");
  if (every < 0)
    throw InvalidArgument(fmt::format(
        "LOCKSTEP_FINGERPRINT_EVERY={} must be >= 0 (0 turns the check off)", every));
  return every;
}

void validate(const DistributedOptimizerOptions& o) {
  if (o.op != ReduceOp::kAverage && o.op != ReduceOp::kSum)
    throw InvalidArgument("DistributedOptimizer: op must be kAverage or kSum");
  if (o.backward_passes_per_step < 1)
    throw InvalidArgument(fmt::format(
        "DistributedOptimizer: backward_passes_per_step={} must be >= 1",
        o.backward_passes_per_step));
  if (!(o.gradient_predivide_factor > 0))
    throw InvalidArgument("DistributedOptimizer: gradient_predivide_factor must be > 0");
  if (o.gradient_predivide_factor != 1.0 && o.op != ReduceOp::kAverage)
    throw InvalidArgument("DistributedOptimizer: gradient_predivide_factor needs op kAverage");
  if (o.compression == Compression::kPowerSGD) validate(o.powersgd);
  if (o.compression == Compression::kOneBit) validate(o.onebit);
  if (detail::replaces_allreduce(o.compression) && o.gradient_predivide_factor != 1.0)
    throw InvalidArgument(
        "DistributedOptimizer: PowerSGD and 1-bit compression do not take gradient_predivide_factor");
  if (o.compression == Compression::kOneBitAdam) validate(o.onebit_adam);
  if (o.compression == Compression::kOneBitLamb) validate(o.onebit_lamb);
  if (detail::compresses_momentum(o.compression)) {
    const char* scheme = o.compression == Compression::kOneBitAdam ? "1-bit Adam" : "1-bit LAMB";
    if (o.op != ReduceOp::kAverage)
      throw InvalidArgument(fmt::format(
          "DistributedOptimizer: {} averages momenta; op must be kAverage", scheme));
    if (o.gradient_predivide_factor != 1.0)
      throw InvalidArgument(fmt::format(
          "DistributedOptimizer: {} does not take gradient_predivide_factor", scheme));
  }
  if (o.adasum && (o.compression != Compression::kNone || o.gradient_predivide_factor != 1.0))
    throw InvalidArgument(
        "DistributedOptimizer: adasum works on full-precision gradients; drop compression and "
        "gradient_predivide_factor");
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
          "to choose)", c.overlap ? "overlaps backward" : "runs once per step, fused", c.why);
  });
  return c.overlap;
}

}  // namespace

detail::OverlapChoice detail::resolve_overlap(Overlap requested, int group_size) {
  if (requested != Overlap::kAuto) return {requested == Overlap::kOn, requested == Overlap::kOn};
  const std::string knob = knob_string("LOCKSTEP_OVERLAP");
  if (knob != "auto" && knob != "on" && knob != "off" && !knob.empty())
    throw InvalidArgument(fmt::format("LOCKSTEP_OVERLAP='{}' is not one of auto, on, off", knob));
  if (knob == "on") return {true, true};
  if (knob == "off" || group_size == 1) return {};
  const bool one_host = local_size() == size();
  const bool pays = overlap_pays(one_host, worker_cpu_count(local_size()), ::at::get_num_threads());
  return {pays, false,
          one_host ? (pays ? "a spare core" : "shared memory and no spare core")
                   : "ranks on several hosts"};
}

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           NamedParameters named,
                                           DistributedOptimizerOptions options)
    : optimizer_(optimizer), options_(std::move(options)), overlap_(decide_overlap(options_.overlap, options_.group)) {
  validate(options_);
  detail::init_step_profiler();
  options_.group.require_member("DistributedOptimizer");
  fingerprint_every_ = fingerprint_interval(options_);
  make_onebit_optimizer();
  detail::check_parameter_names(optimizer_, named);  // repeats hang, omissions never average
  for (auto& [name, param] : named)
    if (param.requires_grad()) add_slot(name, param);
}

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           const ::torch::nn::Module& module,
                                           DistributedOptimizerOptions options)
    : optimizer_(optimizer), options_(std::move(options)), overlap_(decide_overlap(options_.overlap, options_.group)) {
  validate(options_);
  detail::init_step_profiler();
  options_.group.require_member("DistributedOptimizer");
  fingerprint_every_ = fingerprint_interval(options_);
  make_onebit_optimizer();
  NamedParameters named;
  for (const auto& item : module.named_parameters()) named.emplace_back(item.key(), item.value());
  detail::check_parameter_names(optimizer_, named);
  for (const auto& item : module.named_parameters())
    if (item.value().requires_grad()) add_slot(item.key(), item.value());
}

namespace {

// Errors are the caller's to handle elsewhere: here we only need the engine to
// be done with the tensors the operation reads and writes.
void wait_ignoring_errors(TensorHandle& handle) noexcept {
  if (!handle.valid()) return;
  try {
    handle.wait();
  } catch (...) {
  }
}

}  // namespace

DistributedOptimizer::~DistributedOptimizer() {
  detail::profile_detach(this);
  for (auto& slot : slots_) {
    if (!slot->accumulator) continue;
    slot->accumulator->del_post_hook(slot->hook_key);
    auto& pre = slot->accumulator->pre_hooks();
    pre.erase(std::remove_if(pre.begin(), pre.end(), [&](const auto& h) {
                return reinterpret_cast<uintptr_t>(h.get()) == slot->pre_hook_key;
              }), pre.end());
  }
  // Never leave an operation reading a gradient that may be freed.
  reset();
}

void DistributedOptimizer::reset() noexcept {
  for (auto& handle : group_handles_) wait_ignoring_errors(handle);
  group_handles_.clear();
  for (auto& slot : slots_) {
    wait_ignoring_errors(slot->handle);
    slot->handle = TensorHandle();
    slot->wire = ::torch::Tensor();
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
  if (++slot.passes == options_.backward_passes_per_step && overlap_ && options_.group.size() > 1 &&
      allreduces_gradients())
    submit(slot);
}

::torch::Tensor& DistributedOptimizer::wire_tensor(Slot& slot) {
  ::torch::NoGradGuard no_grad;
  ::torch::Tensor& grad = slot.param.mutable_grad();
  if (!grad.defined()) grad = ::torch::zeros_like(slot.param);  // contributes zeros
  // A sparse gradient (Embedding with sparse(true)) travels dense, as with
  // Horovod's sparse_as_dense=True: every scheme below sums or compresses
  // dense tensors in place, and ranks' index sets differ.
  if (grad.is_sparse()) grad = grad.to_dense();
  if (options_.compression == Compression::kNone ||
      detail::compresses_momentum(options_.compression) ||
      detail::replaces_allreduce(options_.compression))
    return grad;
  // The whole divisor goes before the cast so the half-precision sum stays in range.
  const bool average = options_.op == ReduceOp::kAverage;
  // Compressor (compression.h): the same cast a program applies to its own collectives.
  auto [wire, context] =
      Compressor::of(options_.compression).compress(average ? grad / options_.group.size() : grad);
  slot.wire = std::move(wire);
  slot.wire_context = context;
  return slot.wire;
}

AllreduceOptions DistributedOptimizer::wire_options() const {
  // 1-bit Adam's and LAMB's warm-up is plain distributed Adam or LAMB,
  // scaling included.
  const bool scale = options_.op == ReduceOp::kAverage &&
                     (options_.compression == Compression::kNone ||
                      detail::compresses_momentum(options_.compression));
  const double f = options_.gradient_predivide_factor;
  return {.op = ReduceOp::kSum,
          .prescale = scale ? 1.0 / f : 1.0,
          .postscale = scale ? f / options_.group.size() : 1.0,
          .process_set = options_.group.id()};
}

void DistributedOptimizer::submit(Slot& slot) {
  slot.handle = allreduce_async_(wire_tensor(slot), slot.name, wire_options());
  slot.submitted = true;
}

// One group per dtype: negotiated in one cycle and fused, so the engine's
// thread wakes once per step instead of once per gradient.
void DistributedOptimizer::submit_together(const std::vector<Slot*>& slots) {
  std::map<::torch::ScalarType, std::pair<std::vector<::torch::Tensor>, std::vector<std::string>>>
      groups;
  for (Slot* slot : slots) {
    ::torch::Tensor& tensor = wire_tensor(*slot);
    auto& [tensors, names] = groups[tensor.scalar_type()];
    tensors.push_back(tensor);
    names.push_back(slot->name);
    slot->submitted = true;
  }
  for (auto& [dtype, group] : groups)
    group_handles_.push_back(grouped_allreduce_async_(group.first, group.second, wire_options()));
}

void DistributedOptimizer::finish(Slot& slot) {
  if (slot.handle.valid()) slot.handle.wait();
  if (slot.wire.defined()) {
    ::torch::NoGradGuard no_grad;
    slot.param.mutable_grad().copy_(
        Compressor::of(options_.compression).decompress(slot.wire, slot.wire_context));
    slot.wire = ::torch::Tensor();
  }
  slot.handle = TensorHandle();
  slot.submitted = false;
  slot.passes = 0;
}

void DistributedOptimizer::synchronize() {
  detail::profile_sync_begin(this);
  if (options_.adasum && options_.group.size() > 1) {
    adasum_gradients();
  } else if (detail::replaces_allreduce(options_.compression) && options_.group.size() > 1) {
    compressed_gradients();
  } else if (onebit_optimizer_ && onebit_optimizer_->compressing() && options_.group.size() > 1) {
    for (auto& slot : slots_) {
      wire_tensor(*slot);  // local gradients stay; zeros where none (step() sends momenta)
      slot->passes = 0;
    }
  } else if (options_.group.size() > 1) {
    std::vector<Slot*> pending;
    for (auto& slot : slots_)
      if (!slot->submitted) pending.push_back(slot.get());
    if (!pending.empty()) submit_together(pending);
    // Group handles first: finish() copies decompressed results into grad.
    auto groups = std::move(group_handles_);
    group_handles_.clear();
    for (auto& handle : groups) handle.wait();
    for (auto& slot : slots_) finish(*slot);
  } else {
    for (auto& slot : slots_) slot->passes = 0;
  }
  synchronized_ = true;
  detail::profile_sync_end(this);
}

// Every gradient (zeros where none) in one Adasum collective.
void DistributedOptimizer::adasum_gradients() {
  std::vector<::torch::Tensor> grads;
  grads.reserve(slots_.size());
  for (auto& slot : slots_) {
    grads.push_back(wire_tensor(*slot));  // no compression with adasum: the gradient itself
    slot->passes = 0;
  }
  adasum_allreduce_(grads, options_.name_prefix + ".adasum", options_.group);
}

// Gradients go one allreduce each (during backward or fused at synchronize())
// unless a scheme reduces them whole or 1-bit Adam/LAMB sends momenta instead.
bool DistributedOptimizer::allreduces_gradients() const {
  return !options_.adasum && !detail::replaces_allreduce(options_.compression) &&
         !(onebit_optimizer_ && onebit_optimizer_->compressing());
}

void DistributedOptimizer::make_onebit_optimizer() {
  if (options_.compression == Compression::kOneBitAdam) {
    if (auto* adam = dynamic_cast<::torch::optim::Adam*>(&optimizer_))
      onebit_optimizer_ = std::make_unique<OneBitAdam>(*adam, options_.onebit_adam,
                                                       options_.group, options_.name_prefix);
    else if (auto* adamw = dynamic_cast<::torch::optim::AdamW*>(&optimizer_))
      onebit_optimizer_ = std::make_unique<OneBitAdam>(*adamw, options_.onebit_adam,
                                                       options_.group, options_.name_prefix);
    else
      throw InvalidArgument(
          "DistributedOptimizer: compression kOneBitAdam (1-bit Adam) needs a torch::optim::Adam "
          "or torch::optim::AdamW to wrap; for lockstep::optim::Lamb use kOneBitLamb, for other "
          "optimizers kOneBit or kPowerSGD");
  } else if (options_.compression == Compression::kOneBitLamb) {
    auto* lamb = dynamic_cast<optim::Lamb*>(&optimizer_);
    if (lamb == nullptr)
      throw InvalidArgument(
          "DistributedOptimizer: compression kOneBitLamb (1-bit LAMB) needs a "
          "lockstep::optim::Lamb to wrap; for torch::optim::Adam use kOneBitAdam, for other "
          "optimizers kOneBit or kPowerSGD");
    onebit_optimizer_ = std::make_unique<OneBitLamb>(*lamb, options_.onebit_lamb, options_.group,
                                                     options_.name_prefix);
  }
}

// All gradients at once, to the scheme that replaces the allreduce.
void DistributedOptimizer::compressed_gradients() {
  if (!reducer_) reducer_ = detail::make_gradient_reducer(options_);
  std::vector<::torch::Tensor> grads;
  std::vector<std::string> names;
  for (auto& slot : slots_) {
    grads.push_back(wire_tensor(*slot));  // the gradient itself (zeros where none)
    names.push_back(slot->name.substr(options_.name_prefix.size() + 1));  // reducers prefix
    slot->passes = 0;
  }
  reducer_->reduce(grads, names, options_.op == ReduceOp::kAverage);
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
  if (onebit_optimizer_)
    onebit_optimizer_->step();
  else
    optimizer_.step();
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
  check_parameters_agree(named, steps_ == 0 ? "at the first step" : fmt::format("at step {}", steps_),
                         options_.group);
}

// Waits for allreduces still writing a gradient (zero_grad() between backward
// and step()) before zeroing it, and forgets them: the next pass starts a step.
void DistributedOptimizer::zero_grad() {
  detail::profile_zero_grad(this);
  for (auto& slot : slots_) {
    if (slot->handle.valid()) slot->handle.wait();
    slot->handle = TensorHandle();
    slot->wire = ::torch::Tensor();
    slot->submitted = false;
    slot->passes = 0;
    slot->after_step = false;
  }
  optimizer_.zero_grad();
  synchronized_ = false;
}

}  // namespace lockstep::torch
