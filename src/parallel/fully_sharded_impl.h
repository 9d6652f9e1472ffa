// FullyShardedModel's internals, shared by its forward and backward
// (fully_sharded.cc), its gradient reduction and step (fully_sharded_step.cc)
// and its checkpoint view (fully_sharded_state.cc). Note [FSDP units].
#pragma once

#include <torch/torch.h>
#include <torch/csrc/autograd/function.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/parallel/fully_sharded.h"
#include "lockstep/torch/collectives.h"
#include "parallel/piece_state.h"
#include "parallel/shard_layout.h"

namespace lockstep::parallel {

// Group membership and compute_dtype (both paths); throws InvalidArgument.
void validate_common_options(const FullyShardedOptions& options);

// Waits for a unit's collective; a deadlock or timeout says what FSDP needs
// of every rank (its collectives are the units' gathers and reductions).
void wait_unit_collective(lockstep::torch::TensorHandle& handle);

struct FullyShardedModel::Impl {
  // Where a unit's parameter values are (Note [FSDP units]); one state, so
  // that "pinned but released" cannot be written down.
  enum class Residence {
    released,  // full has no memory: reading a parameter is an error
    gathered,  // full holds this step's values until release() (its forward or backward)
    kept,      // gathered and pinned, release() leaves it: the root unit always, the
               // others from gather_full() to release_full()
  };
  struct Unit {
    int first_layer = 0, end_layer = 0;  // [first, end) of the Sequential
    std::string label;                   // for errors: "layers 0..1", a module's path
    std::string tag;                     // in collective names: "0:block1", "0:layers0-1"
    bool root = false;                   // module path: the parameters outside every unit
    std::vector<int> params;             // indices into Impl::params
    ShardBucket layout;                  // one bucket: n segments of layout.shard elements
    ::torch::Tensor full;                // n * shard; memory only while gathered
    ::torch::Tensor shard;               // this rank's segment: what the optimizer steps
    ::torch::Tensor device_shard;        // offload: the segment on the parameters' device
    ::torch::Tensor grad_full;           // flat gradient while the unit's backward runs
    ::torch::Tensor grad_shard;  // this rank's averaged gradient segment, summed over passes
    ::torch::Tensor incoming;    // this pass's segment while its reduce-scatter runs
    ::torch::Tensor host_grad;   // offload: grad_shard in host memory
    lockstep::torch::TensorHandle gathering, reducing;  // gathering: full's all-gather in flight
    Residence residence = Residence::released;
    int ready = 0;      // parameters whose gradient is complete this backward pass
    bool sent = false;  // the gradient reduce-scatter started this backward pass (the
                        // gradient's state, apart from residence: a kept unit is sent and
                        // stays gathered)
  };

  const FullyShardedOptions* options = nullptr;
  std::vector<std::string> names;
  std::vector<::torch::Tensor> params;       // the model's, in module order
  std::vector<std::vector<int64_t>> shapes;  // theirs at construction
  std::vector<int> unit_of;                  // per parameter
  std::vector<Unit> units;
  std::vector<detail::PieceRef> pieces;  // this rank's segments, per placement
  std::vector<std::pair<std::shared_ptr<::torch::autograd::Node>, uintptr_t>> hooks;
  // Module path (FullyShardedUnit submodules): units in named_modules()
  // order; `order` is the first forward's sequence of unit calls, recorded
  // until freeze_order() (first backward or step()), then the backward
  // prefetch target per unit (-1: none). A forward prefetches the unit of
  // the call after the one at `position` in `order` (next_call) and waits
  // for it when the calling unit leaves (`prefetching`), so no all-gather
  // outlives a unit's forward (Note [FSDP units]).
  bool modules = false;
  std::vector<std::shared_ptr<FullyShardedUnitImpl>> unit_modules;
  std::vector<int> order, previous_backward;
  bool order_frozen = false;
  size_t position = 0;     // index into `order` of the call a forward is expected to make next
  int prefetching = -1;    // the unit a forward's prefetch is gathering (-1: none)
  int reducing_unit = -1;  // the one reduce-scatter in flight (-1: none)
  // Gradient accumulation (Note [FSDP passes] in fully_sharded_step.cc).
  bool pass_open = false;     // a backward pass reached the model; end_pass() is queued
  int passes = 0;             // backward passes since the last step() or zero_grad()
  bool reduced = false;       // finish_gradients() ran: gradient shards final until step()
  bool loss_checked = false;  // the first backward looked at the loss's dtype
  int n = 1, me = 0;
  bool element = true;
  bool offload = false;  // resolved: offload_optimizer with device parameters
  ::torch::ScalarType dtype = ::torch::kFloat32;    // the master segments'
  ::torch::ScalarType compute = ::torch::kFloat32;  // the gathered units' (compute_dtype)
  ::torch::Device device = ::torch::kCPU;

  // Mixed precision: a floating input of the model (Sequential path) or of
  // a unit (module path) into the compute dtype; the Sequential's output
  // back to the masters'. Identities without compute_dtype.
  ::torch::Tensor to_compute(const ::torch::Tensor& x) const {
    return compute != dtype && x.is_floating_point() ? x.to(compute) : x;
  }
  ::torch::Tensor to_master(const ::torch::Tensor& x) const {
    return compute != dtype && x.is_floating_point() ? x.to(dtype) : x;
  }
  // fully_sharded.cc
  // gather: a released unit's values into full (wait: landed before it
  // returns); gathered or kept units are left as they are. refresh: a
  // gathered or kept unit's values gathered again (after step() or a
  // load), its residence unchanged.
  // release: a gathered unit's memory dropped; a kept one stays.
  void gather(int unit, bool wait);
  void refresh(int unit);
  void release(int unit);
  void begin_backward(int unit);
  void bind_views(int unit);  // parameters := views of the unit's full buffer
  // On the parameters' gradient accumulators; again after a dtype change
  // (set_data to another dtype gives a parameter a new accumulator).
  void register_hooks();
  void remove_hooks();
  int next_with_params(int unit, int direction) const;
  // The unit to prefetch after `unit`'s backward (-1: none); in forward,
  // next_call (module path: moves `position` past this call of unit).
  int backward_prefetch(int unit) const;
  int next_call(int unit);
  // A FullyShardedUnit's forward: enter before the wrapped forward, leave
  // with its output (the UnitBoundary added in grad mode).
  void enter(int unit);
  ::torch::Tensor leave(int unit, ::torch::Tensor out);
  void freeze_order();
  // fully_sharded_unit.cc: the FullyShardedUnit modules call into this Impl
  // (bind) until the model is destroyed (unbind: they run unsharded).
  void bind_unit_modules();
  void unbind_unit_modules();
  // fully_sharded_build.cc: the options every rank must share (the first
  // line of the description that finish() compares).
  std::string layout_line() const;
  // fully_sharded_build.cc: the parameter's checks, its place in `params`
  // and in unit u; `description` gains its line.
  void add_parameter(int u, const std::string& name, const ::torch::Tensor& p,
                     std::string& description);
  void lay_out(int u);
  // Checks the description against every rank's, shards every unit, hooks.
  void finish(const std::string& description);
  // The all-gather's input: the segment on the parameters' device, in the
  // compute dtype.
  ::torch::Tensor compute_shard(const Unit& u) const {
    const ::torch::Tensor& s = u.device_shard.defined() ? u.device_shard : u.shard;
    return s.scalar_type() == compute ? s : s.to(compute);
  }
  // fully_sharded.cc: a c10::Error from a layer that read a released
  // parameter (outside its unit) as InvalidArgument naming the candidates;
  // other errors rethrown as they are. `where` says what ran.
  [[noreturn]] void explain_layer_error(const std::string& where) const;
  // LibTorch's message `what` when a kernel or a view met a released
  // parameter, explained: `where` read which parameters, `advice` the fix;
  // nullopt for another message or when no parameter is released.
  std::optional<std::string> explain_storage_error(const std::string& what,
                                                   const std::string& where,
                                                   const std::string& advice) const;
  // While the model lives (Note [Reads outside the units], fully_sharded.cc),
  // an uncaught LibTorch error that explain_storage_error recognizes ends
  // the process as lockstep's uncaught InvalidArgument.
  void watch_uncaught();
  void unwatch_uncaught();
  // What the process must know while the model lives (the constructors
  // call watch_process(), the destructor unwatch_process()): the watch
  // above, and lt::shutdown()'s hook running settle_in_flight().
  void watch_process();
  void unwatch_process();
  // Waits for the collectives still in flight (the reduce-scatter a
  // backward without step() left, a prefetch), so an orderly end cuts none
  // short.
  void settle_in_flight();
  uint64_t shutdown_hook = 0;  // lt::add_shutdown_hook's id (0: none)
  // fully_sharded_step.cc
  void on_gradient(int param);
  void open_pass();  // at each backward hook: queues end_pass() once per pass
  void end_pass();   // sends (zeros) for the units this pass did not reach
  // Module path with compute_dtype: warns once when the loss (the pass's
  // graph root) is in the compute dtype, i.e. the output was not cast.
  void check_loss_dtype();
  void send(int unit);
  void land_reduce();
  void accumulate(Unit& unit, const ::torch::Tensor& pass_shard);
  // The flat gradient as the reduce-scatter sends it (reduce_dtype).
  ::torch::Tensor wire_gradient(const ::torch::Tensor& grad_full) const;
  void average_replicas();  // HSDP, in finish_gradients()
  // Every pass's reduce-scatters landed, summed, and averaged across the
  // replicas (HSDP); idempotent until step(). Collective.
  void finish_gradients();
  // This rank's gradient of piece i (a slice of its unit's grad_shard).
  ::torch::Tensor piece_grad(size_t piece) const;
};

}  // namespace lockstep::parallel
