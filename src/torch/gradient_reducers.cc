#include "torch/gradient_reducers.h"

#include "lockstep/base/error.h"
#include "lockstep/torch/onebit.h"
#include "lockstep/torch/powersgd.h"

namespace lockstep::torch::detail {

bool replaces_allreduce(Compression compression) {
  return compression == Compression::kPowerSGD || compression == Compression::kOneBit;
}

std::unique_ptr<GradientReducer> make_gradient_reducer(const DistributedOptimizerOptions& o) {
  switch (o.compression) {
    case Compression::kPowerSGD:
      return std::make_unique<PowerSGD>(o.powersgd, o.group, o.name_prefix);
    case Compression::kOneBit:
      return std::make_unique<OneBit>(o.onebit, o.group, o.name_prefix);
    default:
      throw InvalidArgument("make_gradient_reducer: this compression allreduces each gradient");
  }
}

}  // namespace lockstep::torch::detail
