// The "onebit-adam" and "onebit-lamb" GradientSchemes: a OneBitOptimizer
// (onebit_optimizer.h) over the wrapped Adam(W) or Lamb. Its warm-up is the
// "allreduce" scheme without a cast (plain distributed Adam or LAMB, bitwise);
// after it synchronize() leaves each rank's local gradient (zeros where none)
// and step() sends the momenta as signs and a scale instead.
#include <fmt/format.h>

#include <utility>

#include "lockstep/base/error.h"
#include "lockstep/torch/onebit_adam.h"
#include "lockstep/torch/onebit_lamb.h"
#include "torch/gradient_schemes.h"
#include "torch/scheme_allreduce.h"

namespace lockstep::torch::detail {
namespace {

class OneBitOptimizerScheme : public GradientScheme {
 public:
  OneBitOptimizerScheme(std::unique_ptr<OneBitOptimizer> onebit, const GradientSchemeContext& c)
      : onebit_(std::move(onebit)), warmup_(c.options, Compression::kNone, c.gradients) {}

  bool gradient_ready(Gradient& gradient) override {
    return !onebit_->compressing() && warmup_.gradient_ready(gradient);
  }
  void synchronize(std::span<Gradient* const> gradients) override {
    if (!onebit_->compressing()) return warmup_.synchronize(gradients);
    for (Gradient* g : gradients) dense_gradient(*g);  // local gradients stay: step() sends momenta
  }
  void step(::torch::optim::Optimizer& /*optimizer: the one onebit_ wraps*/) override {
    onebit_->step();
  }
  void discard() override { warmup_.discard(); }
  void reset() noexcept override { warmup_.reset(); }

 private:
  std::unique_ptr<OneBitOptimizer> onebit_;
  AllreduceScheme warmup_;
};

// 1-bit Adam and LAMB average momenta: op kAverage, no predivide factor.
void check_momentum_options(const DistributedOptimizerOptions& o, const char* scheme) {
  if (o.op != ReduceOp::kAverage)
    throw InvalidArgument(
        fmt::format("DistributedOptimizer: {} averages momenta; op must be kAverage", scheme));
  refuse_predivide(o, scheme);
}

}  // namespace

std::unique_ptr<GradientScheme> make_onebit_adam_scheme(const GradientSchemeContext& c) {
  const DistributedOptimizerOptions& o = c.options;
  validate(o.onebit_adam);
  check_momentum_options(o, "1-bit Adam");
  std::unique_ptr<OneBitOptimizer> onebit;
  // The scheme wraps the optimizer's own state, so it must know which one it is.
  if (auto* adam = dynamic_cast<::torch::optim::Adam*>(&c.optimizer))
    onebit = std::make_unique<OneBitAdam>(*adam, o.onebit_adam, o.group, o.name_prefix);
  else if (auto* adamw = dynamic_cast<::torch::optim::AdamW*>(&c.optimizer))
    onebit = std::make_unique<OneBitAdam>(*adamw, o.onebit_adam, o.group, o.name_prefix);
  else
    throw InvalidArgument(
        "DistributedOptimizer: compression kOneBitAdam (1-bit Adam) needs a torch::optim::Adam "
        "or torch::optim::AdamW to wrap; for lockstep::optim::Lamb use kOneBitLamb, for other "
        "optimizers kOneBit or kPowerSGD");
  return std::make_unique<OneBitOptimizerScheme>(std::move(onebit), c);
}

std::unique_ptr<GradientScheme> make_onebit_lamb_scheme(const GradientSchemeContext& c) {
  const DistributedOptimizerOptions& o = c.options;
  validate(o.onebit_lamb);
  check_momentum_options(o, "1-bit LAMB");
  auto* lamb = dynamic_cast<optim::Lamb*>(&c.optimizer);
  if (lamb == nullptr)
    throw InvalidArgument(
        "DistributedOptimizer: compression kOneBitLamb (1-bit LAMB) needs a "
        "lockstep::optim::Lamb to wrap; for torch::optim::Adam use kOneBitAdam, for other "
        "optimizers kOneBit or kPowerSGD");
  return std::make_unique<OneBitOptimizerScheme>(
      std::make_unique<OneBitLamb>(*lamb, o.onebit_lamb, o.group, o.name_prefix), c);
}

}  // namespace lockstep::torch::detail
