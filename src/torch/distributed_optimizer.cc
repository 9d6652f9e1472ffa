#include "lockstep/torch/distributed_optimizer.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include "lockstep/base/error.h"

namespace lockstep::torch {

struct DistributedOptimizer::Slot {
  std::string name;
  ::torch::Tensor param;
  std::shared_ptr<::torch::autograd::Node> accumulator;  // keeps the hook's node alive
  uintptr_t hook_key = 0;
  int passes = 0;          // gradient-ready events in this step
  bool submitted = false;
  TensorHandle handle;
  ::torch::Tensor wire;    // compressed copy on the wire (compression only)
};

namespace {

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

::torch::ScalarType wire_dtype(Compression c) {
  return c == Compression::kFp16 ? ::torch::kFloat16 : ::torch::kBFloat16;
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
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           NamedParameters named,
                                           DistributedOptimizerOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  validate(options_);
  for (auto& [name, param] : named)
    if (param.requires_grad()) add_slot(name, param);
}

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           const ::torch::nn::Module& module,
                                           DistributedOptimizerOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  validate(options_);
  for (const auto& item : module.named_parameters())
    if (item.value().requires_grad()) add_slot(item.key(), item.value());
}

DistributedOptimizer::~DistributedOptimizer() {
  for (auto& slot : slots_) {
    if (slot->accumulator) slot->accumulator->del_post_hook(slot->hook_key);
    // Never leave an operation reading a gradient that may be freed.
    if (slot->submitted) {
      try {
        slot->handle.wait();
      } catch (...) {
      }
    }
  }
}

void DistributedOptimizer::add_slot(std::string name, const ::torch::Tensor& param) {
  auto slot = std::make_unique<Slot>();
  slot->name = options_.name_prefix + "." + name;
  slot->param = param;
  slot->accumulator = ::torch::autograd::impl::grad_accumulator(param);
  if (!slot->accumulator)
    throw InvalidArgument(fmt::format(
        "DistributedOptimizer: parameter {} is not a leaf tensor requiring grad", name));
  Slot* raw = slot.get();
  slot->hook_key = slot->accumulator->add_post_hook(
      std::make_unique<GradientReadyHook>([this, raw] { on_gradient_ready(*raw); }));
  slots_.push_back(std::move(slot));
}

void DistributedOptimizer::on_gradient_ready(Slot& slot) {
  synchronized_ = false;
  if (slot.submitted) {
    throw InvalidArgument(fmt::format(
        "DistributedOptimizer: gradient of {} produced again after its allreduce started; call "
        "step() once every backward_passes_per_step={} backward passes",
        slot.name, options_.backward_passes_per_step));
  }
  if (++slot.passes == options_.backward_passes_per_step && size() > 1) submit(slot);
}

void DistributedOptimizer::submit(Slot& slot) {
  ::torch::NoGradGuard no_grad;
  ::torch::Tensor& grad = slot.param.mutable_grad();
  if (!grad.defined()) grad = ::torch::zeros_like(slot.param);  // contributes zeros
  const double n = size();
  const bool average = options_.op == ReduceOp::kAverage;
  if (options_.compression == Compression::kNone) {
    const double f = options_.gradient_predivide_factor;
    slot.handle = allreduce_async_(grad, slot.name,
                                   {.op = ReduceOp::kSum,
                                    .prescale = average ? 1.0 / f : 1.0,
                                    .postscale = average ? f / n : 1.0});
  } else {
    // The whole divisor goes before the cast so the half-precision sum stays in range.
    slot.wire = (average ? grad / n : grad).to(wire_dtype(options_.compression));
    slot.handle = allreduce_async_(slot.wire, slot.name, {.op = ReduceOp::kSum});
  }
  slot.submitted = true;
}

void DistributedOptimizer::finish(Slot& slot) {
  slot.handle.wait();
  if (slot.wire.defined()) {
    ::torch::NoGradGuard no_grad;
    slot.param.mutable_grad().copy_(slot.wire);
    slot.wire = ::torch::Tensor();
  }
  slot.handle = TensorHandle();
  slot.submitted = false;
  slot.passes = 0;
}

void DistributedOptimizer::synchronize() {
  if (size() > 1) {
    for (auto& slot : slots_)
      if (!slot->submitted) submit(*slot);
    for (auto& slot : slots_) finish(*slot);
  } else {
    for (auto& slot : slots_) slot->passes = 0;
  }
  synchronized_ = true;
}

void DistributedOptimizer::step() {
  if (!synchronized_) synchronize();
  optimizer_.step();
  synchronized_ = false;
}

void DistributedOptimizer::zero_grad() {
  optimizer_.zero_grad();
  synchronized_ = false;
}

}  // namespace lockstep::torch
