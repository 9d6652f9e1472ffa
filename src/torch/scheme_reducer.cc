// The "powersgd" and "onebit" GradientSchemes: a GradientReducer
// (gradient_reducer.h) takes the whole step's gradients at synchronize()
// instead of one allreduce each; nothing moves during backward.
#include <string>
#include <utility>
#include <vector>

#include "lockstep/torch/gradient_reducer.h"
#include "lockstep/torch/onebit.h"
#include "lockstep/torch/powersgd.h"
#include "torch/gradient_schemes.h"

namespace lockstep::torch::detail {
namespace {

class ReducerScheme : public GradientScheme {
 public:
  ReducerScheme(std::unique_ptr<GradientReducer> reducer, const DistributedOptimizerOptions& o)
      : reducer_(std::move(reducer)),
        prefix_length_(o.name_prefix.size() + 1),
        average_(o.op == ReduceOp::kAverage) {}

  void synchronize(std::span<Gradient* const> gradients) override {
    std::vector<::torch::Tensor> grads;
    std::vector<std::string> names;
    for (Gradient* g : gradients) {
      grads.push_back(dense_gradient(*g));
      names.push_back(g->name.substr(prefix_length_));  // reducers add the prefix themselves
    }
    reducer_->reduce(grads, names, average_);
  }

 private:
  std::unique_ptr<GradientReducer> reducer_;
  size_t prefix_length_;
  bool average_;
};

}  // namespace

std::unique_ptr<GradientScheme> make_powersgd_scheme(const GradientSchemeContext& context) {
  const DistributedOptimizerOptions& o = context.options;
  auto reducer = std::make_unique<PowerSGD>(o.powersgd, o.group, o.name_prefix);  // validates
  refuse_predivide(o, "PowerSGD");
  return std::make_unique<ReducerScheme>(std::move(reducer), o);
}

std::unique_ptr<GradientScheme> make_onebit_scheme(const GradientSchemeContext& context) {
  const DistributedOptimizerOptions& o = context.options;
  auto reducer = std::make_unique<OneBit>(o.onebit, o.group, o.name_prefix);  // validates
  refuse_predivide(o, "1-bit compression");
  return std::make_unique<ReducerScheme>(std::move(reducer), o);
}

}  // namespace lockstep::torch::detail
