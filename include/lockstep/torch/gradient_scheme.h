// GradientScheme: how a DistributedOptimizer's gradients are reduced across
// its group, the one extension point for it. The optimizer keeps the
// bookkeeping every scheme shares (autograd hooks, backward passes, the
// gradients that arrive after step(), fingerprints, profiling) and hands a
// scheme three moments of a step:
//
//   gradient_ready(g)  backward has produced g for this step (overlap only)
//   synchronize(all)   every gradient of the step, before the update
//   step(optimizer)    the update itself
//
// The built-in schemes (docs/torch.md "How gradients are reduced"):
//
//   "allreduce"    one allreduce per gradient, fused, overlapping backward;
//                  with Compression::kFp16/kBf16 cast for the wire
//   "adasum"       Adasum (adasum.h) over all gradients at synchronize()
//   "powersgd"     PowerSGD (powersgd.h) at synchronize()
//   "onebit"       1-bit compression (onebit.h) at synchronize()
//   "onebit-adam"  1-bit Adam (onebit_adam.h): "allreduce" in the warm-up,
//                  then momenta compressed by step()
//   "onebit-lamb"  1-bit LAMB (onebit_lamb.h): the same over a Lamb
//
// DistributedOptimizerOptions picks one: `scheme` by name when set, else
// the name that `adasum` and `compression` imply. A scheme of your own is
// one class and one register_gradient_scheme() line (docs/extending.md,
// "Adding a gradient-reduction scheme").
//
// One scheme object serves one DistributedOptimizer, on its training
// thread: schemes need not be thread-safe. The registry is thread-safe.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lockstep::torch {

struct DistributedOptimizerOptions;

// One parameter's gradient as DistributedOptimizer hands it to its scheme.
// Owned by the optimizer; valid for the scheme's whole life.
struct Gradient {
  int index = 0;          // place in the optimizer's order: the same on every rank
  std::string name;       // <name_prefix>.<parameter name>: name its collectives after it
  ::torch::Tensor param;  // the parameter: reduce param.mutable_grad() in place
};

// `gradient`'s param.grad(), made dense and defined: zeros where backward
// gave none (so every rank reduces the same tensors), a sparse gradient
// (Embedding with sparse(true)) densified, as Horovod's sparse_as_dense.
::torch::Tensor& dense_gradient(const Gradient& gradient);

// What a scheme's factory is given.
struct GradientSchemeContext {
  ::torch::optim::Optimizer& optimizer;        // the wrapped optimizer
  const DistributedOptimizerOptions& options;  // checked: op, passes, predivide factor
  int gradients = 0;                           // Gradient::index runs over [0, gradients)
};

class GradientScheme {
 public:
  virtual ~GradientScheme() = default;

  // The last backward pass of this step has produced `gradient`. Called
  // only while the optimizer overlaps backward and its group has more than
  // one rank. Return true when its reduction started now: another backward
  // pass into it before step() is then an error. Default: false (nothing
  // moves before synchronize()).
  virtual bool gradient_ready(Gradient& gradient);
  // Leaves in each param.grad() what step() should apply: every gradient of
  // the step, in index order (reduce dense_gradient(g)). Called only when
  // the group has more than one rank (one rank's gradient is its own), once
  // per step. Collective over options.group.
  virtual void synchronize(std::span<Gradient* const> gradients) = 0;
  // The update. Default: optimizer.step().
  virtual void step(::torch::optim::Optimizer& optimizer);
  // zero_grad() before synchronize(): wait for reductions still writing a
  // gradient (their errors propagate) and forget them.
  virtual void discard() {}
  // The same after a failed step (DistributedOptimizer::reset()): errors
  // ignored. Never throws.
  virtual void reset() noexcept {}
};

// Makes the scheme; throws InvalidArgument naming an option it cannot take
// (before any hook is installed, so a refused optimizer leaves no trace).
using GradientSchemeFactory =
    std::function<std::unique_ptr<GradientScheme>(const GradientSchemeContext&)>;

// Registers `factory` under `name`, for DistributedOptimizerOptions::scheme,
// process-wide. Every rank must register the same schemes. Throws
// InvalidArgument for an empty name, an empty factory or a name already
// taken (the built-in names included).
void register_gradient_scheme(std::string name, GradientSchemeFactory factory);
// The names options.scheme may take: the built-ins above, then those
// registered, in order.
std::vector<std::string> gradient_scheme_names();

}  // namespace lockstep::torch
