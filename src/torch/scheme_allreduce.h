// The "allreduce" GradientScheme: one allreduce per gradient, submitted as
// backward produces it when the optimizer overlaps, else all of them fused
// at synchronize() (one group per dtype). With Compression::kFp16/kBf16 a
// gradient travels cast (Compressor, compression.h), divided by the group's
// size first when averaging so that the half-precision sum stays in range.
// 1-bit Adam's and LAMB's warm-up is this scheme without a cast.
//
// Owned by one DistributedOptimizer; not thread-safe.
#pragma once

#include <vector>

#include "lockstep/policy/compression.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/compression.h"
#include "lockstep/torch/distributed_optimizer.h"
#include "lockstep/torch/gradient_scheme.h"

namespace lockstep::torch::detail {

class AllreduceScheme : public GradientScheme {
 public:
  // `cast`: kNone, kFp16 or kBf16. Reads op, gradient_predivide_factor and
  // group from `options`.
  AllreduceScheme(const DistributedOptimizerOptions& options, Compression cast, int gradients);

  bool gradient_ready(Gradient& gradient) override;  // submits it
  void synchronize(std::span<Gradient* const> gradients) override;
  void discard() override;
  void reset() noexcept override;

 private:
  struct InFlight {
    TensorHandle handle;
    ::torch::Tensor wire;  // the cast copy on the wire (a cast only)
    Compressor::Context wire_context;
    bool submitted = false;
  };

  ::torch::Tensor& wire_tensor(const Gradient& gradient);
  AllreduceOptions wire_options() const;
  void submit_together(std::span<Gradient* const> gradients);
  void finish(const Gradient& gradient);

  Compression cast_;
  policy::CompressionKind wire_kind_;  // cast_ as the policy names it
  bool average_;
  double predivide_;
  Group group_;
  std::vector<InFlight> in_flight_;  // by Gradient::index
  std::vector<TensorHandle> group_handles_;
};

}  // namespace lockstep::torch::detail
