// DistributedOptimizer: wraps any torch::optim::Optimizer so that gradients
// are averaged (or summed) across ranks before each step, with the allreduce
// of each gradient starting as soon as backward has produced it.
//
// How: a post-hook on each parameter's gradient accumulator fires once the
// gradient is in param.grad(); on the last of `backward_passes_per_step`
// passes it submits the allreduce to the engine, which fuses and runs it on
// its background thread while backward goes on. step() waits only for what is
// still in flight, then calls the wrapped optimizer's step(). Without
// overlap (options.overlap), step() submits every gradient as one group.
//
// Parameters that got no gradient in a step (unused branch, frozen on this
// rank only) contribute zeros: synchronize() gives them a zero gradient and
// allreduces it, so no rank waits for a tensor another rank never sends. A
// parameter that no rank used therefore ends up with a zero (not undefined)
// gradient.
//
// How the gradients travel is the scheme's (gradient_scheme.h): one
// allreduce each (cast to fp16/bf16 or not), Adasum, PowerSGD, 1-bit, 1-bit
// Adam or 1-bit LAMB, as `adasum` and `compression` say, or one registered
// under options.scheme. Chosen once, in the constructor.
//
// Gradients of several backward passes are summed, as plain LibTorch does;
// scale the loss by 1/backward_passes_per_step for the mean.
//
// Every rank must construct the optimizer over the same parameters in the
// same order (names are derived from the module's parameter names). Not
// thread-safe: drive it from the training thread.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lockstep/comm/types.h"
#include "lockstep/policy/policies.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/gradient_scheme.h"
#include "lockstep/torch/group.h"
#include "lockstep/torch/onebit.h"
#include "lockstep/torch/onebit_adam.h"
#include "lockstep/torch/onebit_lamb.h"
#include "lockstep/torch/powersgd.h"

namespace lockstep::torch {

enum class Compression {
  kNone,
  kFp16,      // IEEE half on the wire; gradients divided before casting
  kBf16,      // bfloat16 on the wire
  kPowerSGD,  // low-rank factors on the wire (powersgd.h; options.powersgd), at synchronize()
  kOneBit,    // signs and a scale on the wire (onebit.h; options.onebit), at synchronize()
  // DeepSpeed's 1-bit Adam (onebit_adam.h; options.onebit_adam): needs a
  // torch::optim::Adam or AdamW and op kAverage. Warm-up steps are those of kNone;
  // after them synchronize() leaves each rank's local gradient and step()
  // sends the momentum as signs and a scale instead.
  kOneBitAdam,
  // DeepSpeed's 1-bit LAMB (onebit_lamb.h; options.onebit_lamb): the same
  // over a lockstep::optim::Lamb, its trust ratios frozen after the warm-up
  // and rescaled by how far the frozen variance drifts.
  kOneBitLamb,
};

// Whether gradients are allreduced as backward produces them (overlap) or
// all at once, fused, when step()/synchronize() is called. kAuto follows
// LOCKSTEP_OVERLAP (auto|on|off); its auto is on across hosts or with a
// spare core, off when shared memory would compete with backward for the
// worker's only cores (policy::choose_overlap, lockstep/policy/policies.h).
enum class Overlap { kAuto, kOn, kOff };

namespace detail {
// How an Overlap request resolves, shared by every optimizer that overlaps
// communication with compute: an explicit kOn/kOff wins, then
// LOCKSTEP_OVERLAP (auto|on|off; anything else throws InvalidArgument),
// then policy::choose_overlap for this placement. `forced` is true when the user
// asked for on (by option or variable); `why` names the auto rule that
// decided ("" when not auto) for the caller's one-time log line.
using OverlapChoice = policy::OverlapChoice;  // policy::choose_overlap decides
OverlapChoice resolve_overlap(Overlap requested, int group_size);
}  // namespace detail

struct DistributedOptimizerOptions {
  ReduceOp op = ReduceOp::kAverage;  // kAverage or kSum
  // Combine gradients with Adasum (adasum.h, Horovod's op=hvd.Adasum) instead
  // of op: per parameter, at step()/synchronize() (never during backward).
  // Do not scale the learning rate by the number of workers. Not with
  // compression or gradient_predivide_factor. Horovod applies Adasum to each
  // rank's optimizer update rather than its gradient; for SGD the two agree.
  // Combines over `group`, like op.
  bool adasum = false;
  int backward_passes_per_step = 1;  // allreduce only on the last pass
  Compression compression = Compression::kNone;
  PowerSGDOptions powersgd{};       // with Compression::kPowerSGD
  OneBitOptions onebit{};           // with Compression::kOneBit
  OneBitAdamOptions onebit_adam{};  // with Compression::kOneBitAdam
  OneBitLambOptions onebit_lamb{};  // with Compression::kOneBitLamb
  // Average only: divide by this before the reduction and by size()/factor
  // after (>1 keeps large sums of small ranks in range).
  double gradient_predivide_factor = 1.0;
  std::string name_prefix = "grad";  // tensor names: <prefix>.<parameter name>
  Overlap overlap = Overlap::kAuto;
  // Ranks whose gradients are averaged (default: all), e.g. the data-parallel
  // replicas of one pipeline stage or tensor shard (lockstep/parallel/mesh.h).
  Group group{};
  // Compare parameter fingerprints across the ranks of `group` (fingerprint.h)
  // at the first step() and then every this many steps; -1:
  // LOCKSTEP_FINGERPRINT_EVERY, 0: never (parameters that are meant to differ
  // across the group's ranks). Ranks outside the group (other tensor shards,
  // pipeline stages) are never compared.
  int64_t fingerprint_every = -1;
  // A scheme registered with register_gradient_scheme() (gradient_scheme.h)
  // to reduce the gradients instead of the built-in one that adasum and
  // compression choose (leave those unset); "" (default): theirs.
  std::string scheme{};
};

// Sets options.compression (and PowerSGD's rank) from a `--compression`
// name: none, fp16, bf16, powersgd:R, onebit, onebit-adam or onebit-lamb (the
// planner's names, lockstep/policy/compression.h). Throws InvalidArgument naming
// the text.
void set_compression(DistributedOptimizerOptions& options, std::string_view name);

class DistributedOptimizer {
 public:
  using NamedParameters = std::vector<std::pair<std::string, ::torch::Tensor>>;

  // `optimizer` must outlive this object; every parameter of `named` must be
  // one the optimizer updates.
  DistributedOptimizer(::torch::optim::Optimizer& optimizer, NamedParameters named,
                       DistributedOptimizerOptions options = {});
  // Names taken from module.named_parameters().
  DistributedOptimizer(::torch::optim::Optimizer& optimizer, const ::torch::nn::Module& module,
                       DistributedOptimizerOptions options = {});
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;
  ~DistributedOptimizer();

  // Waits for every gradient's allreduce (submitting zeros for parameters
  // with none) and writes the results into param.grad(). Call it yourself
  // before gradient clipping; step() then does not reduce again.
  void synchronize();
  // synchronize() unless already done since the last zero_grad(), then the
  // wrapped optimizer's step(). Call it once per backward_passes_per_step
  // backward passes. At the first step and every fingerprint_every steps it
  // first checks that every rank of options().group holds the same
  // parameters (MismatchError naming the first that differs: call
  // broadcast_parameters()). Collective over the group.
  void step();
  void zero_grad();
  // Drops everything in flight after a failed step (handles failed with
  // PeerFailure/Aborted, or an engine that was shut down): waits each handle
  // ignoring its error and forgets submitted gradients, so this object works
  // again on a new engine. Never throws. Gradients are left as they are
  // (possibly half-reduced): zero them before the next backward.
  void reset() noexcept;

  ::torch::optim::Optimizer& optimizer() { return optimizer_; }
  const DistributedOptimizerOptions& options() const { return options_; }
  bool overlaps_backward() const { return overlap_; }

  struct Slot;

 private:
  void add_slot(std::string name, const ::torch::Tensor& param);
  void on_gradient_ready(Slot& slot);
  void check_fingerprint_if_due();

  ::torch::optim::Optimizer& optimizer_;
  DistributedOptimizerOptions options_;
  bool overlap_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Gradient*> gradients_;  // slots_ as the scheme sees them, in order
  bool synchronized_ = false;
  int64_t steps_ = 0;
  int64_t fingerprint_every_ = 0;
  std::unique_ptr<GradientScheme> scheme_;  // how gradients are reduced (gradient_scheme.h)
};

}  // namespace lockstep::torch
