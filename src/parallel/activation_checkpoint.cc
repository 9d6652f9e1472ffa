#include "lockstep/parallel/activation_checkpoint.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <fmt/format.h>

#include <mutex>
#include <optional>
#include <utility>

#include "lockstep/base/error.h"
#include "parallel/wrapped_names.h"

namespace lockstep::parallel {

using ::torch::Tensor;
using ::torch::autograd::AutogradContext;
using ::torch::autograd::variable_list;

namespace {

// The state a forward ran under and its recomputation must see again: the
// random generators (dropout) and autocast (mixed precision).
struct ForwardState {
  Tensor cpu_rng;
  std::optional<::torch::Device> cuda_device;
  Tensor cuda_rng;
  bool cpu_autocast = false;
  ::torch::ScalarType cpu_autocast_dtype = ::torch::kBFloat16;
  bool cuda_autocast = false;
  ::torch::ScalarType cuda_autocast_dtype = ::torch::kHalf;
};

Tensor rng_state(const at::Generator& generator) {
  std::lock_guard<std::mutex> lock(const_cast<at::Generator&>(generator).mutex());
  return generator.get_state();
}

void set_rng_state(at::Generator generator, const Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// The CUDA generator only for a CUDA input, so CPU builds never touch it.
ForwardState capture(const Tensor& input) {
  ForwardState s;
  s.cpu_rng = rng_state(at::detail::getDefaultCPUGenerator());
  if (input.is_cuda()) {
    s.cuda_device = input.device();
    s.cuda_rng = rng_state(at::globalContext().defaultGenerator(input.device()));
  }
  s.cpu_autocast = at::autocast::is_cpu_enabled();
  s.cpu_autocast_dtype = at::autocast::get_autocast_cpu_dtype();
  s.cuda_autocast = at::autocast::is_enabled();
  s.cuda_autocast_dtype = at::autocast::get_autocast_gpu_dtype();
  return s;
}

// RAII: the forward's generators and autocast for the recomputation; the
// backward's own on destruction, so the random stream continues as if the
// forward had not been repeated.
class ReplayGuard {
 public:
  explicit ReplayGuard(const ForwardState& forward) : saved_(capture_like(forward)) {
    apply(forward);
    at::autocast::increment_nesting();
  }
  ~ReplayGuard() {
    // Weight casts made during the replay are cached per autocast region.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    apply(saved_);
  }
  ReplayGuard(const ReplayGuard&) = delete;
  ReplayGuard& operator=(const ReplayGuard&) = delete;

 private:
  static ForwardState capture_like(const ForwardState& forward) {
    ForwardState s = capture(Tensor());
    if (forward.cuda_device) {
      s.cuda_device = forward.cuda_device;
      s.cuda_rng = rng_state(at::globalContext().defaultGenerator(*forward.cuda_device));
    }
    return s;
  }
  static void apply(const ForwardState& s) {
    set_rng_state(at::detail::getDefaultCPUGenerator(), s.cpu_rng);
    if (s.cuda_device)
      set_rng_state(at::globalContext().defaultGenerator(*s.cuda_device), s.cuda_rng);
    at::autocast::set_cpu_enabled(s.cpu_autocast);
    at::autocast::set_autocast_cpu_dtype(s.cpu_autocast_dtype);
    at::autocast::set_enabled(s.cuda_autocast);
    at::autocast::set_autocast_gpu_dtype(s.cuda_autocast_dtype);
  }

  ForwardState saved_;
};

// Travels in the autograd context (an IValue capsule: no class registration).
struct Segment : ::torch::CustomClassHolder {
  SegmentForward forward;
  ForwardState state;
};

Tensor run_segment(const SegmentForward& forward, const Tensor& input) {
  Tensor out = forward(input);
  if (!out.defined())
    throw InvalidArgument("checkpoint: the checkpointed forward returned an undefined tensor");
  return out;
}

// Note [Checkpoint function]
// Inputs are (input, parameters...), so the node exists and parameters get
// gradients even when `input` needs none.
// Only these references are saved: no activation of the segment survives
// its forward.
struct CheckpointFunction : ::torch::autograd::Function<CheckpointFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& input, at::TensorList parameters,
                        c10::intrusive_ptr<Segment> segment) {
    segment->state = capture(input);
    variable_list saved{input};
    saved.insert(saved.end(), parameters.begin(), parameters.end());
    ctx->save_for_backward(std::move(saved));
    Tensor out = run_segment(segment->forward, input);  // grad mode is off here
    ctx->saved_data["segment"] = c10::IValue::make_capsule(std::move(segment));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    auto segment =
        c10::static_intrusive_pointer_cast<Segment>(ctx->saved_data["segment"].toCapsule());
    // A fresh leaf sharing the input's storage: the replay's graph ends here.
    Tensor input = saved[0].detach().requires_grad_(saved[0].requires_grad());
    variable_list wrt;
    std::vector<size_t> position;  // index in (input, parameters...) of each of wrt
    for (size_t i = 0; i < saved.size(); ++i) {
      const Tensor& t = i == 0 ? input : saved[i];
      if (t.requires_grad()) {
        wrt.push_back(t);
        position.push_back(i);
      }
    }
    variable_list grads(saved.size() + 1);  // + the segment argument, no gradient
    Tensor out;
    {
      ReplayGuard replay(segment->state);
      ::torch::AutoGradMode enable(true);
      out = run_segment(segment->forward, input);
    }
    if (!out.requires_grad() || wrt.empty()) return grads;
    variable_list computed = ::torch::autograd::grad({out}, wrt, {grad_outputs[0]},
                                                     /*retain_graph=*/false,
                                                     /*create_graph=*/false,
                                                     /*allow_unused=*/true);
    for (size_t k = 0; k < computed.size(); ++k) grads[position[k]] = std::move(computed[k]);
    return grads;
  }
};

bool needs_graph(const Tensor& input, const std::vector<Tensor>& parameters) {
  if (!::torch::GradMode::is_enabled()) return false;
  if (input.requires_grad()) return true;
  for (const auto& p : parameters)
    if (p.requires_grad()) return true;
  return false;
}

}  // namespace

Tensor checkpoint(SegmentForward forward, const Tensor& input, std::vector<Tensor> parameters) {
  if (!forward) throw InvalidArgument("checkpoint: no forward function given");
  if (!input.defined()) throw InvalidArgument("checkpoint: the input tensor is undefined");
  if (!needs_graph(input, parameters)) return run_segment(forward, input);
  auto segment = c10::make_intrusive<Segment>();
  segment->forward = std::move(forward);
  return CheckpointFunction::apply(input, at::TensorList(parameters), std::move(segment));
}

Tensor checkpoint(const ::torch::nn::AnyModule& module, const Tensor& input) {
  if (module.is_empty()) throw InvalidArgument("checkpoint: the module is empty");
  auto any = module;  // AnyModule::forward is not const
  return checkpoint([any](const Tensor& x) mutable { return any.forward(x); }, input,
                    module.ptr()->parameters());
}

CheckpointedImpl::CheckpointedImpl(::torch::nn::AnyModule module)
    : CheckpointedImpl(module.is_empty() ? nullptr : module.ptr(),
                       [module](const Tensor& x) mutable { return module.forward(x); }) {}

CheckpointedImpl::CheckpointedImpl(::torch::nn::Sequential module)
    : CheckpointedImpl(module.ptr(),
                       [module](const Tensor& x) mutable { return module->forward(x); }) {}

CheckpointedImpl::CheckpointedImpl(std::shared_ptr<::torch::nn::Module> module,
                                   SegmentForward forward)
    : module_(std::move(module)), forward_(std::move(forward)) {
  if (!module_ || !forward_) throw InvalidArgument("Checkpointed: no module given");
  detail::adopt_names(*this, *module_);  // the wrapped module's names, one level up
}

Tensor CheckpointedImpl::forward(const Tensor& input) {
  return checkpoint(forward_, input, module_->parameters());
}

void CheckpointedImpl::train(bool on) {
  ::torch::nn::Module::train(on);
  module_->train(on);
}

void CheckpointedImpl::pretty_print(std::ostream& stream) const {
  stream << "lockstep::parallel::Checkpointed(";
  module_->pretty_print(stream);
  stream << ")";
}

::torch::nn::Sequential checkpoint_layers(const ::torch::nn::Sequential& model, int segment) {
  if (segment < 1)
    throw InvalidArgument(fmt::format("checkpoint_layers: segment={} must be >= 1", segment));
  ::torch::nn::Sequential layers = model;  // begin() is not const
  const auto names = model->named_children().keys();
  ::torch::nn::Sequential out;
  for (size_t first = 0, index = 0; first < model->size();
       first += static_cast<size_t>(segment), ++index) {
    if (segment == 1) {  // the layer itself: its names stay the model's
      out->push_back(std::string(names[first]),
                     Checkpointed(*(layers->begin() + static_cast<std::ptrdiff_t>(first))));
      continue;
    }
    ::torch::nn::Sequential part;
    for (size_t i = first; i < std::min(model->size(), first + static_cast<size_t>(segment)); ++i)
      part->push_back(names[i], *(layers->begin() + static_cast<std::ptrdiff_t>(i)));
    out->push_back(std::to_string(index), Checkpointed(part));
  }
  return out;
}

}  // namespace lockstep::parallel
