// The "adasum" GradientScheme: every gradient of the step (zeros where
// none) in one Adasum collective at synchronize() (adasum.h), never during
// backward.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/torch/adasum.h"
#include "torch/gradient_schemes.h"

namespace lockstep::torch::detail {
namespace {

class AdasumScheme : public GradientScheme {
 public:
  explicit AdasumScheme(const DistributedOptimizerOptions& options)
      : name_(options.name_prefix + ".adasum"), group_(options.group) {}

  void synchronize(std::span<Gradient* const> gradients) override {
    std::vector<::torch::Tensor> grads;
    grads.reserve(gradients.size());
    for (Gradient* g : gradients) grads.push_back(dense_gradient(*g));
    adasum_allreduce_(grads, name_, group_);
  }

 private:
  std::string name_;
  Group group_;
};

}  // namespace

std::unique_ptr<GradientScheme> make_adasum_scheme(const GradientSchemeContext& context) {
  const DistributedOptimizerOptions& o = context.options;
  if (o.compression != Compression::kNone || o.gradient_predivide_factor != 1.0)
    throw InvalidArgument(
        "DistributedOptimizer: adasum works on full-precision gradients; drop compression and "
        "gradient_predivide_factor");
  return std::make_unique<AdasumScheme>(o);
}

}  // namespace lockstep::torch::detail
