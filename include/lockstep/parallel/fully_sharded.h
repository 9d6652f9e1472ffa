// FullyShardedModel: fully sharded data parallelism (ZeRO stage 3,
// Rajbhandari et al. SC'20; PyTorch's FSDP). Each rank of the group keeps
// 1/N of every parameter, its gradient and its optimizer state; the whole
// parameters of a unit of layers exist only while that unit computes.
//
//   auto model = torch::nn::Sequential(...);           // same seed on every rank
//   lp::FullyShardedModel fsdp(model, {.layers_per_unit = 2});
//   torch::optim::Adam adam(fsdp.parameters(), 1e-3);  // steps the shards
//   fsdp.zero_grad();
//   loss_fn(fsdp.forward(x), y).backward();
//   fsdp.step(adam);
//
// Units (Note [FSDP units] in fully_sharded.cc): the Sequential's layers,
// `layers_per_unit` consecutive ones per unit, each unit's parameters laid
// out as one flat buffer split into N equal segments (shard_layout.h, the
// ZeRO layout with one bucket per unit). The model's parameters stay its own
// tensors (names, checkpoints and activation checkpointing see them
// unchanged) but are views into their unit's flat buffer, whose memory is
// allocated only between the unit's all-gather and its release:
//   forward:  all-gather unit k (prefetch k+1 on the engine), run its layers,
//             release the buffer (autograd's saved views keep no memory);
//   backward: before unit k's backward, all-gather it again (prefetch k-1);
//             its gradients accumulate into one flat buffer, which is
//             reduce-scattered (averaged) into this rank's gradient shard
//             once every parameter of the unit has its gradient; then the
//             parameters and the flat gradient are released;
//   step:     the optimizer updates this rank's segments (parameters()),
//             which are the next forward's all-gather inputs.
// Gradient accumulation: k backwards per step() (micro-batches) are reduced
// one pass at a time and summed into the gradient segments, what data
// parallelism computes with backward_passes_per_step = k (scale the loss by
// 1/k for the mean; Note [FSDP passes] in fully_sharded_grad.cc).
// Clipping: fsdp.clip_grad_norm(max_norm) between the last backward and
// step(); LibTorch's clip_grad_norm_ over parameters() finds no gradient
// there (the segments get theirs inside step()).
// Traffic per step per rank: 2 all-gathers + 1 reduce-scatter of the padded
// parameters, 3(N-1)/N·P elements (data parallelism's allreduce: 2(N-1)/N·P).
// Memory per rank: (P + G + S)/N for parameters, gradients and optimizer
// state, plus the units in flight (one computing, one prefetched, one flat
// gradient being reduced) and activations.
//
// Exactness: elementwise optimizers (SGD, Adam, AdamW, RMSprop, Adagrad) may
// step element shards; optimizers whose step needs whole-tensor norms (LAMB,
// LARS, NovoGrad) need granularity = kTensor, where each rank owns whole
// parameters (step() refuses the wrong pairing). Either way the update is
// data parallelism's (docs/parallelism.md, "Fully sharded").
//
// HSDP: `replicate` (a Mesh dimension's group, say) makes the model sharded
// within `group` and replicated across `replicate`: the gradient shards are
// averaged across the replicas after the reduce-scatter.
//
// Mixed precision (compute_dtype, e.g. kBFloat16): the units are gathered
// and computed in compute_dtype, forward() casts its floating input to it and
// its output back to the parameters' dtype; the segments the optimizer steps
// (master weights) stay in the parameters' dtype, and gradients are cast to
// it before the reduce-scatter (so they are averaged at full precision).
// Checkpoints hold the master values.
//
// Gradient compression (reduce_dtype, PyTorch FSDP's
// MixedPrecision(reduce_dtype=...); data parallelism's Compression::kFp16 /
// kBf16): each rank divides its flat gradient by the group size, casts it to
// reduce_dtype, the reduce-scatter sums in it and the segment is cast back to
// the masters' dtype (summed there over micro-batches); HSDP's replica
// average travels in it too. The gradient bytes on the wire halve (from f32);
// the price is one rounding of each rank's share and of the sum to 8 (bf16)
// or 11 (fp16) significant bits, what DistributedOptimizer with kBf16/kFp16
// pays. Unlike PyTorch, reduce_dtype does not follow compute_dtype: unset,
// gradients are averaged in the masters' dtype. fp16 needs the averaged
// gradients to stay under 65504 (no loss scaling here). PowerSGD and 1-bit
// schemes are not available with sharding (fsdp_reduce_dtype() names them).
//
// CPU offload (offload_optimizer): the shards that the optimizer steps and its
// state live in host memory (pinned), the gradient shard is copied there
// before the step and the updated shard back to the device after it. For
// parameters already on the CPU this is what happens anyway: a no-op.
//
// Your own module (any torch::nn::Module whose forward calls submodules,
// the way PyTorch FSDP's nested wrapping shards one): wrap the submodules
// that should be units in FullyShardedUnit (fsdp_unit) where the model
// registers them, and build the FullyShardedModel over the whole model:
//
//   fc1 = register_module("fc1", lp::fsdp_unit(torch::nn::Linear(512, 2048)));
//   ...
//   auto net = Net();                                   // same seed on every rank
//   lp::FullyShardedModel fsdp(net);                    // finds fc1, ... (units)
//   torch::optim::Adam adam(fsdp.parameters(), 1e-3);
//   fsdp.zero_grad();
//   loss_fn(net->forward(x), y).backward();             // the model's own forward
//   fsdp.step(adam);
//
// A unit's forward does what forward() does per unit above: gather (and
// prefetch the unit of the next call in the first forward's sequence of
// calls, recorded until the first backward or step(), so the first forward
// prefetches nothing; the last call prefetches nothing), compute, release,
// wait for the prefetch (no all-gather is in flight between units or after
// a forward, so lt::shutdown() with the model alive finds none pending),
// and put the UnitBoundary on its output so that backward gathers it again.
// Units are numbered in named_modules() order (registration order: the same
// on every rank, which construction checks); every rank's forward must call them in the same
// order (the same code: their gathers are collectives). Parameters outside
// every unit form one root unit that is sharded for the optimizer but stays
// gathered all the time (its gradient is reduce-scattered like a unit's,
// and step() all-gathers the updated root): LibTorch has no hook at the
// start of the model's forward, and the model may read them anywhere in it. So keep the root small
// (norms, scales, a head) and put the big layers in units. The wrapper keeps the wrapped module's
// names (as Checkpointed does), so checkpoints and named_parameters() are the plain model's. A unit
// may run more than once per forward (shared weights): it is gathered for each call and its
// gradient reduced once. Mixed precision works as above, per unit: a unit
// casts its floating input to compute_dtype and hands its output on in it;
// the root unit is gathered in compute_dtype too (so the model's own code
// between units computes in it), its masters sharded like a unit's; the
// model's output is in compute_dtype (cast it for the loss, as forward()
// does for a Sequential). Not supported (InvalidArgument at construction):
// nested units, parameters shared between units or registered both in a
// unit and outside it (tied weights across a unit), and models without any
// unit. A unit's parameter read outside its forward without being
// registered there (a head tied to an embedding in another unit) holds no
// memory: a read from inside a unit's forward (or a layer of forward()) is
// an InvalidArgument naming the parameter; one from the model's own code
// between units is LibTorch's c10::Error (no lockstep code runs there),
// which, left uncaught while the model lives, ends the process as an
// uncaught lockstep::InvalidArgument naming it (exit code 70, not SIGABRT;
// lockstep/base/terminate.h). Tied weights: compute both uses in one
// module that is one unit (it runs twice per forward), or keep the shared
// weight outside every unit (the root unit is always gathered).
// forward() and module() are the Sequential path's. Once the
// FullyShardedModel is destroyed the units run unsharded, but their
// parameters hold memory only if gather_full() was called before.
//
// Requirements: every rank wraps the same model (same layer structure,
// parameter names and shapes: checked at construction, which throws
// InvalidArgument naming the first rank and parameter that differ) built
// from the same seed (rank 0's values are broadcast); every parameter
// requires grad and is a contiguous floating tensor of one dtype and device;
// every rank runs every forward and backward (a deadlock message names the
// unit's module and says so); the optimizer is built on parameters() (one
// param group, for checkpoints). A Sequential runs only through forward(): LibTorch
// C++ has no forward pre-hooks (and wrapping its layers would change what
// model[i] returns), so its model->forward(x) reads released memory and
// fails with LibTorch's c10::Error; left uncaught while the model lives, it
// ends the process as an uncaught lockstep::InvalidArgument saying to call
// fsdp.forward(x) (or gather_full() first). With FullyShardedUnit layers,
// build over the module instead.
// Construction is collective over the group. The object must outlive the
// backward of every forward it ran (backward calls back into it). Not
// thread-safe: drive it from the training thread. Not copyable.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/parallel/activation_checkpoint.h"
#include "lockstep/parallel/sharded_optimizer.h"
#include "lockstep/torch/checkpoint.h"
#include "lockstep/torch/group.h"

namespace lockstep::parallel {

namespace detail::ckdir {
struct Access;  // checkpoint directories read and write the shards in place
}  // namespace detail::ckdir

struct FullyShardedOptions {
  int layers_per_unit = 1;  // consecutive layers of the Sequential per unit
  // kElement (or kAuto): equal element segments; kTensor: whole parameters
  // per rank, for optimizers that need whole-tensor norms (LAMB, LARS).
  ShardGranularity granularity = ShardGranularity::kAuto;
  bool prefetch = true;            // all-gather the next unit while one computes
  bool offload_optimizer = false;  // shards and optimizer state in host memory
  // Mixed precision: gather and compute in this dtype (masters keep theirs).
  std::optional<::torch::ScalarType> compute_dtype = std::nullopt;
  // Gradient compression: the reduce-scatter (and HSDP's replica average)
  // in this floating dtype, kBFloat16 or kHalf (see above). Unset: masters'.
  std::optional<::torch::ScalarType> reduce_dtype = std::nullopt;
  Group group{};  // the ranks that shard the model (default: every rank)
  std::optional<Group> replicate = std::nullopt;  // HSDP: replicas of the sharded model
  std::string name = "fsdp";                      // collective-name prefix
};

class FullyShardedModel {
 public:
  // Takes `model` over: its parameters become views of the units' buffers and
  // this rank keeps only its segments. Collective over options.group.
  explicit FullyShardedModel(::torch::nn::Sequential model, FullyShardedOptions options = {});
  // Over your own module: its FullyShardedUnit submodules are the units, the
  // rest of its parameters the root unit (see above). Collective.
  explicit FullyShardedModel(std::shared_ptr<::torch::nn::Module> model,
                             FullyShardedOptions options = {});
  template <typename ModuleType>
  explicit FullyShardedModel(::torch::nn::ModuleHolder<ModuleType> model,
                             FullyShardedOptions options = {})
      : FullyShardedModel(std::static_pointer_cast<::torch::nn::Module>(model.ptr()),
                          std::move(options)) {}
  FullyShardedModel(const FullyShardedModel&) = delete;
  FullyShardedModel& operator=(const FullyShardedModel&) = delete;
  ~FullyShardedModel();

  // The layers in order, each unit gathered just before it runs. In grad
  // mode, backward re-gathers each unit and reduce-scatters its gradients.
  // Sequential path only (over a module, call the module's forward).
  ::torch::Tensor forward(::torch::Tensor x);
  // This rank's segments, what the optimizer steps (in unit order).
  std::vector<::torch::Tensor> parameters() const;
  void zero_grad();
  // Completes the gradient reduce-scatters (and the replicas' average),
  // gives each segment its gradient and steps `optimizer`, which must update
  // exactly parameters(). Gradients of every backward since the last step()
  // or zero_grad() are summed (accumulation). Collective.
  void step(::torch::optim::Optimizer& optimizer);
  // PyTorch FSDP's clip_grad_norm_: between the last backward and step(),
  // completes the reduce-scatters (and the replicas' average), computes the
  // global norm of the averaged gradients of the whole model (norm_type 2,
  // any p > 0, or infinity for the max; accumulated in f32, f64 for f64
  // masters; one allreduce) and scales this rank's gradient segments by
  // min(1, max_norm / (norm + 1e-6)), as torch::nn::utils::clip_grad_norm_
  // does on a whole model. Returns the norm before clipping. Collective.
  // (clip_grad_norm_ over parameters() sees no gradient before step(): the
  // segments get theirs inside it.) A backward after it throws until step().
  double clip_grad_norm(double max_norm, double norm_type = 2.0);

  // The wrapped model. Its parameters hold no memory between units' uses;
  // gather_full() makes them whole (e.g. to evaluate with model->forward).
  // Sequential path only; wrapped() is the model given, either kind.
  ::torch::nn::Sequential& module();
  ::torch::nn::Module& wrapped() { return *root_; }
  // Gathers every unit and keeps it (collective); release_full() frees them.
  void gather_full();
  void release_full();

  const FullyShardedOptions& options() const { return options_; }
  int units() const;
  bool element_granularity() const;
  // Elements of parameters in the largest unit (what one unit in flight costs).
  int64_t max_unit_elements() const;
  // Elements this rank keeps of all parameters (its segments, padding included).
  int64_t shard_elements() const;

  // For checkpoints (lockstep/parallel/checkpoint.h). Collective: whole
  // parameters and whole optimizer state in `optimizer` while `body` runs
  // (as a one-process model and optimizer built on module()->parameters()
  // would hold them), then the shard view again, keeping what body changed:
  // a checkpoint loaded inside body becomes this rank's segments.
  void with_full_view(::torch::optim::Optimizer& optimizer, bool keep_changes,
                      const std::function<void()>& body);

  struct Impl;

 private:
  friend struct detail::ckdir::Access;
  ::torch::nn::Sequential model_{nullptr};     // null when built over a module
  std::shared_ptr<::torch::nn::Module> root_;  // the model, either kind
  FullyShardedOptions options_;
  std::unique_ptr<Impl> impl_;
};

// A unit of a FullyShardedModel built over your own module: wraps a module
// with forward(Tensor) -> Tensor, keeping its names (its children,
// parameters and buffers registered one level up, as Checkpointed does).
// Until a FullyShardedModel takes the model it is the wrapped module; after,
// its forward gathers the unit's parameters, runs the wrapped forward and
// releases them (see FullyShardedModel). Not thread-safe, like the model.
class FullyShardedUnitImpl : public ::torch::nn::Module {
 public:
  template <typename ModuleType>
  explicit FullyShardedUnitImpl(::torch::nn::ModuleHolder<ModuleType> module)
      : FullyShardedUnitImpl(::torch::nn::AnyModule(std::move(module))) {}
  explicit FullyShardedUnitImpl(::torch::nn::AnyModule module);
  explicit FullyShardedUnitImpl(::torch::nn::Sequential module);
  FullyShardedUnitImpl(std::shared_ptr<::torch::nn::Module> module, SegmentForward forward);

  ::torch::Tensor forward(const ::torch::Tensor& input);
  void train(bool on = true) override;
  void pretty_print(std::ostream& stream) const override;
  const std::shared_ptr<::torch::nn::Module>& wrapped() const { return module_; }
  // Whether a (living) FullyShardedModel holds this unit.
  bool sharded() const { return owner_ != nullptr; }

 private:
  friend struct FullyShardedModel::Impl;  // binds the unit to its model
  std::shared_ptr<::torch::nn::Module> module_;
  SegmentForward forward_;
  FullyShardedModel::Impl* owner_ = nullptr;  // null: not (or no longer) sharded
  int unit_ = -1;
};
// TORCH_MODULE spelled out (see Checkpointed).
class FullyShardedUnit : public ::torch::nn::ModuleHolder<FullyShardedUnitImpl> {
 public:
  using ::torch::nn::ModuleHolder<FullyShardedUnitImpl>::ModuleHolder;
  using Impl = FullyShardedUnitImpl;
};

// fc = register_module("fc", fsdp_unit(torch::nn::Linear(8, 8))).
template <typename ModuleType>
FullyShardedUnit fsdp_unit(ModuleType module) {
  return FullyShardedUnit(std::move(module));
}

// The reduce_dtype of DistributedOptimizer's wire compression: kFp16 ->
// kHalf, kBf16 -> kBFloat16, kNone -> nullopt. PowerSGD and the 1-bit
// schemes throw InvalidArgument naming the scheme (they replace the
// allreduce of whole gradients, which a sharded model never holds). Also
// for ShardedOptimizerOptions::reduce_dtype.
std::optional<::torch::ScalarType> fsdp_reduce_dtype(lockstep::torch::Compression compression);

// World-size-independent checkpoints of a fully sharded model: the file is
// lockstep::torch::save_checkpoint's for the whole model and optimizer, so
// it loads at any world size, with any FullyShardedOptions, under
// ShardedOptimizer or into a plain model and optimizer on one process.
// Collective over fsdp's group; saving assembles the whole model and
// optimizer state on every rank of the group for a moment.
void save_checkpoint(const std::string& path, FullyShardedModel& fsdp,
                     ::torch::optim::Optimizer& optimizer,
                     const lockstep::torch::TrainingProgress& progress);
// False when `path` does not exist; lockstep::Error when it is corrupt or
// does not match the model (a parameter of another shape is named; the
// model and the optimizer keep what they held).
bool load_checkpoint(const std::string& path, FullyShardedModel& fsdp,
                     ::torch::optim::Optimizer& optimizer,
                     lockstep::torch::TrainingProgress& progress);

}  // namespace lockstep::parallel
