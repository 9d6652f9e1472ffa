#include "torch/scheme_allreduce.h"

#include <map>
#include <string>
#include <utility>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/policy/compression.h"
#include "torch/gradient_schemes.h"

namespace lockstep::torch::detail {
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

AllreduceScheme::AllreduceScheme(const DistributedOptimizerOptions& options, Compression cast,
                                 int gradients)
    : cast_(cast),
      wire_kind_(compression_kind(cast)),
      average_(options.op == ReduceOp::kAverage),
      predivide_(options.gradient_predivide_factor),
      group_(options.group),
      in_flight_(static_cast<size_t>(gradients)) {
  Compressor::of(cast_);  // a cast, or InvalidArgument
}

::torch::Tensor& AllreduceScheme::wire_tensor(const Gradient& gradient) {
  ::torch::Tensor& grad = dense_gradient(gradient);
  if (cast_ == Compression::kNone) return grad;
  ::torch::NoGradGuard no_grad;
  // Averaged without a pass after the sum (policy::scales_after_reduce): the
  // whole divisor goes before the cast so the half-precision sum stays in range.
  const bool divide_first = average_ && !policy::scales_after_reduce(wire_kind_, average_);
  auto [wire, context] = Compressor::of(cast_).compress(divide_first ? grad / group_.size() : grad);
  LOCKSTEP_DCHECK_EQ(wire.element_size(),
                     policy::wire_element_bytes(wire_kind_, static_cast<int>(grad.element_size()),
                                                grad.is_floating_point()),
                     "the cast's wire width is the one the planner prices");
  InFlight& f = in_flight_[gradient.index];
  f.wire = std::move(wire);
  f.wire_context = context;
  return f.wire;
}

AllreduceOptions AllreduceScheme::wire_options() const {
  // Otherwise a cast gradient was divided before the cast (wire_tensor).
  const bool scale = policy::scales_after_reduce(wire_kind_, average_);
  return {.op = ReduceOp::kSum,
          .prescale = scale ? 1.0 / predivide_ : 1.0,
          .postscale = scale ? predivide_ / group_.size() : 1.0,
          .process_set = group_.id()};
}

bool AllreduceScheme::gradient_ready(Gradient& gradient) {
  InFlight& f = in_flight_[gradient.index];
  f.handle = allreduce_async_(wire_tensor(gradient), gradient.name, wire_options());
  f.submitted = true;
  return true;
}

// One group per dtype: negotiated in one cycle and fused, so the engine's
// thread wakes once per step instead of once per gradient.
void AllreduceScheme::submit_together(std::span<Gradient* const> gradients) {
  std::map<::torch::ScalarType, std::pair<std::vector<::torch::Tensor>, std::vector<std::string>>>
      groups;
  for (Gradient* g : gradients) {
    if (in_flight_[g->index].submitted) continue;
    ::torch::Tensor& tensor = wire_tensor(*g);
    auto& [tensors, names] = groups[tensor.scalar_type()];
    tensors.push_back(tensor);
    names.push_back(g->name);
    in_flight_[g->index].submitted = true;
  }
  for (auto& [dtype, group] : groups)
    group_handles_.push_back(grouped_allreduce_async_(group.first, group.second, wire_options()));
}

void AllreduceScheme::finish(const Gradient& gradient) {
  InFlight& f = in_flight_[gradient.index];
  if (f.handle.valid()) f.handle.wait();
  if (f.wire.defined()) {
    ::torch::NoGradGuard no_grad;
    gradient.param.mutable_grad().copy_(Compressor::of(cast_).decompress(f.wire, f.wire_context));
    f.wire = ::torch::Tensor();
  }
  f.handle = TensorHandle();
  f.submitted = false;
}

void AllreduceScheme::synchronize(std::span<Gradient* const> gradients) {
  submit_together(gradients);
  // Group handles first: finish() copies decompressed results into grad.
  auto groups = std::move(group_handles_);
  group_handles_.clear();
  for (auto& handle : groups) handle.wait();
  for (Gradient* g : gradients) finish(*g);
}

void AllreduceScheme::discard() {
  for (InFlight& f : in_flight_) {
    if (f.handle.valid()) f.handle.wait();
    f = InFlight();
  }
}

void AllreduceScheme::reset() noexcept {
  for (auto& handle : group_handles_) wait_ignoring_errors(handle);
  group_handles_.clear();
  for (InFlight& f : in_flight_) {
    wait_ignoring_errors(f.handle);
    f = InFlight();
  }
}

std::unique_ptr<GradientScheme> make_allreduce_scheme(const GradientSchemeContext& context) {
  return std::make_unique<AllreduceScheme>(context.options, context.options.compression,
                                           context.gradients);
}

}  // namespace lockstep::torch::detail
