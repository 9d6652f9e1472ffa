#include "torch/gradient_reducers.h"

#include "lockstep/base/error.h"
#include "lockstep/plan/compression.h"
#include "lockstep/torch/onebit.h"
#include "lockstep/torch/powersgd.h"

namespace lockstep::torch {

void set_compression(DistributedOptimizerOptions& o, std::string_view name) {
  const plan::CompressionSpec spec = plan::parse_compression(name);
  switch (spec.kind) {
    case plan::CompressionKind::kNone: o.compression = Compression::kNone; break;
    case plan::CompressionKind::kFp16: o.compression = Compression::kFp16; break;
    case plan::CompressionKind::kBf16: o.compression = Compression::kBf16; break;
    case plan::CompressionKind::kPowerSGD:
      o.compression = Compression::kPowerSGD;
      o.powersgd.rank = spec.rank;
      break;
    case plan::CompressionKind::kOneBit: o.compression = Compression::kOneBit; break;
    case plan::CompressionKind::kOneBitAdam: o.compression = Compression::kOneBitAdam; break;
    case plan::CompressionKind::kOneBitLamb: o.compression = Compression::kOneBitLamb; break;
  }
}

}  // namespace lockstep::torch

namespace lockstep::torch::detail {

bool replaces_allreduce(Compression compression) {
  return compression == Compression::kPowerSGD || compression == Compression::kOneBit;
}

bool compresses_momentum(Compression compression) {
  return compression == Compression::kOneBitAdam || compression == Compression::kOneBitLamb;
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
