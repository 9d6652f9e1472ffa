// Tensor-level collectives for LibTorch, on top of the lockstep engine.
//
// Contract: call lockstep::torch::init() once per process (it starts the
// process-wide engine from the environment: `lockstep run`, mpirun, or a
// single process). Every rank must issue the same named operations (in any
// order); an empty name is replaced by "<op>.<n>" with a per-op counter, so
// unnamed calls must then be issued in the same order on every rank.
// Tensors must live on the CPU; non-contiguous ones are copied. Supported
// dtypes: f16, bf16, f32, f64, i8, u8, i16, i32, i64 (others, bool and
// sparse tensors: InvalidArgument). Integer pre/postscale multiply in f64 and
// truncate toward zero, as Horovod does.
//
// Autograd: the synchronous out-of-place forms (allreduce, grouped_allreduce,
// allgather, broadcast, alltoall, reduce_scatter) are differentiable with
// Horovod's backward rules (allreduce -> allreduce of the gradient with the
// same op and scale factors; allgather -> summed gradient, this rank's rows;
// broadcast -> summed gradient on root, zero elsewhere; alltoall -> alltoall
// back with the received splits; reduce_scatter -> allgather, divided by the
// set size for average; min/max/product refuse backward). Backward runs
// collectives named "<name>.grad" (auto-named for unnamed calls), so EVERY
// rank of the set must run backward through the same collectives. The async
// forms are not differentiable; the in-place forms refuse a leaf that
// requires grad while grad mode is on (as PyTorch does).
//
// Async calls return a TensorHandle that keeps its tensors alive (dropped
// unwaited, until the operation finishes); the input must not be modified
// until wait() returns. Errors (PeerFailure,
// MismatchError, TimeoutError...) surface from wait().
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/types.h"
#include "lockstep/engine/handle.h"

namespace lockstep::torch {

using comm::ReduceOp;

// Starts the engine (unless already started) and applies the CPU placement
// (threads, affinity, malloc thresholds: lockstep/torch/placement.h).
// Idempotent.
void init();
// Stops the engine; collective over all ranks. Idempotent. Runs the
// shutdown hooks first.
void shutdown();
// Work a live object must finish while the engine still runs: shutdown()
// calls every hook first, in the order added (a FullyShardedModel lands the
// reduce-scatter a backward without step() left in flight), so an orderly
// end cuts no collective short. A hook that throws is logged and the others
// still run. Thread-safe: one mutex guards the list and is held while the
// hooks run, so a hook must not add or remove hooks.
uint64_t add_shutdown_hook(std::function<void()> hook);
void remove_shutdown_hook(uint64_t id);
bool is_initialized();
// Before init(): 0 and 1 (a single process), so code runs unchanged.
int rank();
int size();
int local_rank();
int local_size();
int cross_rank();  // index of this host among the job's hosts
int cross_size();  // number of hosts

class TensorHandle {
 public:
  TensorHandle() = default;
  // `finish` runs once, on the waiting thread, after the operation succeeded
  // (copies results back into non-contiguous outputs, decompresses...).
  TensorHandle(engine::Handle handle, std::shared_ptr<::torch::Tensor> result,
               std::vector<::torch::Tensor> keep_alive, std::function<void()> finish = {});
  // A group's handle: `results` in the group's order (result() is undefined).
  TensorHandle(engine::Handle handle, std::vector<std::shared_ptr<::torch::Tensor>> results,
               std::vector<::torch::Tensor> keep_alive, std::function<void()> finish = {});
  // Dropped (or assigned over) before wait(): the tensors the engine reads
  // and writes and the names the operation holds stay alive until the
  // operation finishes (Horovod keeps them until synchronize); its result and
  // any error are discarded, and `finish` does not run. Never blocks.
  ~TensorHandle();
  TensorHandle(const TensorHandle&) = default;
  TensorHandle(TensorHandle&&) noexcept = default;
  TensorHandle& operator=(TensorHandle other) noexcept;

  bool valid() const { return handle_.valid(); }
  bool poll() const;
  // Blocks, rethrows the operation's error, then runs the finish step.
  void wait();
  // wait(), then the result tensor.
  ::torch::Tensor result();
  // wait(), then a group's results in order (the grouped operations: for
  // grouped_allreduce_async_ the tensors themselves); for a single
  // operation, a one-element list holding result().
  std::vector<::torch::Tensor> results();
  // wait(), then, for an alltoall, how many dim-0 rows came from each member
  // of the set (empty for other operations).
  std::vector<int64_t> received_splits();

 private:
  engine::Handle handle_;
  std::shared_ptr<::torch::Tensor> result_;
  std::vector<std::shared_ptr<::torch::Tensor>> results_;  // a group's, else empty
  std::vector<::torch::Tensor> keep_alive_;
  std::function<void()> finish_;
  bool finished_ = false;
};

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kAverage;
  double prescale = 1.0;   // applied to each input before reducing
  double postscale = 1.0;  // applied to the result
  int process_set = 0;
};

// Out of place: returns a new tensor with the reduction.
TensorHandle allreduce_async(const ::torch::Tensor& tensor, std::string name = {},
                             AllreduceOptions options = {});
::torch::Tensor allreduce(const ::torch::Tensor& tensor, std::string name = {},
                          AllreduceOptions options = {});
// In place: `tensor` holds the reduction once the handle completes.
TensorHandle allreduce_async_(::torch::Tensor& tensor, std::string name = {},
                              AllreduceOptions options = {});
void allreduce_(::torch::Tensor& tensor, std::string name = {}, AllreduceOptions options = {});
// In place on several tensors of one dtype and device, negotiated and fused
// as one group (one handle; result() is undefined, the tensors hold the
// results, and results() returns them).
TensorHandle grouped_allreduce_async_(std::vector<::torch::Tensor>& tensors,
                                      std::vector<std::string> names,
                                      AllreduceOptions options = {});
// Out of place and differentiable: new tensors with the reductions, one
// group as above.
std::vector<::torch::Tensor> grouped_allreduce(const std::vector<::torch::Tensor>& tensors,
                                               std::vector<std::string> names,
                                               AllreduceOptions options = {});

// Concatenation of every rank's tensor along dim 0 (sizes may differ in dim 0).
TensorHandle allgather_async(const ::torch::Tensor& tensor, std::string name = {},
                             int process_set = 0);
::torch::Tensor allgather(const ::torch::Tensor& tensor, std::string name = {},
                          int process_set = 0);
// The same, written into `output` (contiguous, the input's dtype), which the
// caller allocated: its memory is the caller's (an AllocationTracker on the
// calling thread sees it) and no result tensor is created. When the gathered
// shape differs from output's (ranks sent other sizes), wait() throws
// InvalidArgument naming both shapes and output is left unspecified.
TensorHandle allgather_into_async(const ::torch::Tensor& tensor, ::torch::Tensor output,
                                  std::string name = {}, int process_set = 0);

// In place: every rank's `tensor` holds root's values afterwards.
TensorHandle broadcast_async_(::torch::Tensor& tensor, int root, std::string name = {},
                              int process_set = 0);
void broadcast_(::torch::Tensor& tensor, int root, std::string name = {}, int process_set = 0);
// Out of place copy of root's tensor.
::torch::Tensor broadcast(const ::torch::Tensor& tensor, int root, std::string name = {},
                          int process_set = 0);
// Out of place and asynchronous (Horovod's broadcast_async): result() is a
// new tensor with root's values; `tensor` is left as it is (copied at the
// call, so it may change meanwhile). Not differentiable, like every async form.
TensorHandle broadcast_async(const ::torch::Tensor& tensor, int root, std::string name = {},
                             int process_set = 0);

// splits[r] rows of dim 0 go to rank r (empty: split evenly). Returns the
// rows received, concatenated in rank order.
TensorHandle alltoall_async(const ::torch::Tensor& tensor, std::vector<int64_t> splits = {},
                            std::string name = {}, int process_set = 0);
::torch::Tensor alltoall(const ::torch::Tensor& tensor, std::vector<int64_t> splits = {},
                         std::string name = {}, int process_set = 0);
// Horovod's `output, received_splits = hvd.alltoall(tensor, splits)`: the
// rows received and how many came from each member (differentiable as
// alltoall).
struct AlltoallResult {
  ::torch::Tensor output;
  std::vector<int64_t> received_splits;
};
AlltoallResult alltoall_with_splits(const ::torch::Tensor& tensor, std::vector<int64_t> splits = {},
                                    std::string name = {}, int process_set = 0);

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kAverage;
  int process_set = 0;
};

// Reduces every rank's tensor (same shape everywhere), then rank r keeps the
// r-th slice of dim 0: dim0 / size rows, the first dim0 % size ranks one more.
TensorHandle reduce_scatter_async(const ::torch::Tensor& tensor, std::string name = {},
                                  ReduceScatterOptions options = {});
::torch::Tensor reduce_scatter(const ::torch::Tensor& tensor, std::string name = {},
                               ReduceScatterOptions options = {});
// Into the caller's `output`, as allgather_into_async.
TensorHandle reduce_scatter_into_async(const ::torch::Tensor& tensor, ::torch::Tensor output,
                                       std::string name = {}, ReduceScatterOptions options = {});

// Horovod's grouped_allgather / grouped_reducescatter: the tensors (one
// name each, one device; dtypes may differ) are submitted to the engine as one group,
// as grouped_allreduce is: announced in one negotiation cycle, completing
// together under one handle whose results() are the per-tensor results in
// order (each as its single-tensor form would return it). The synchronous
// forms return those results and are differentiable (backward: one grouped
// allreduce of the gradients, resp. one grouped allgather). A member that is
// invalid on this rank (undefined, sparse, a duplicate or pending name)
// throws InvalidArgument before any member is submitted.
TensorHandle grouped_allgather_async(const std::vector<::torch::Tensor>& tensors,
                                     std::vector<std::string> names, int process_set = 0);
std::vector<::torch::Tensor> grouped_allgather(const std::vector<::torch::Tensor>& tensors,
                                               std::vector<std::string> names, int process_set = 0);
TensorHandle grouped_reduce_scatter_async(const std::vector<::torch::Tensor>& tensors,
                                          std::vector<std::string> names,
                                          ReduceScatterOptions options = {});
std::vector<::torch::Tensor> grouped_reduce_scatter(const std::vector<::torch::Tensor>& tensors,
                                                    std::vector<std::string> names,
                                                    ReduceScatterOptions options = {});

// Horovod's sparse_allreduce (hvd.allreduce of a sparse COO tensor): an
// allgather of every member's indices ("<name>.indices") and values
// ("<name>.values"); the result has the input's sizes and is NOT coalesced
// (an index held by several ranks appears once per rank, as in Horovod;
// coalesce() sums them). kAverage divides the values by the set size; only
// kSum and kAverage (InvalidArgument otherwise). Not differentiable.
::torch::Tensor sparse_allreduce(const ::torch::Tensor& tensor, std::string name,
                                 ReduceOp op = ReduceOp::kAverage, int process_set = 0);

void barrier();
// Uneven data: this rank has no more batches. Until every rank joined, the
// others' collectives go on with this rank contributing neutral values
// (averages divide by the ranks that have not joined; integer ones truncate
// toward zero). Meanwhile allgather, alltoall, reduce_scatter and a broadcast
// whose root joined fail with InvalidArgument, as Horovod's do. Returns the
// last rank to join. Before init(): 0.
int join();
// Collective over all ranks (all pass the same ranks): a new process set, the
// id to pass as `process_set` above.
int add_process_set(std::vector<int> ranks);
// Horovod's remove_process_set: collective over all ranks (all pass the same
// id, in the same order as their add_process_set calls). The set's thread
// and communicator go; its id is not reused, and collectives, Groups and
// DistributedOptimizers over it fail by name afterwards. InvalidArgument on
// every rank alike for the global set 0, an unknown or already removed id,
// and while an operation of the set has not completed on some rank (the
// message counts them per rank and names this rank's).
void remove_process_set(int id);
// Chrome-trace timeline of the collectives (rank 0 writes; LOCKSTEP_TIMELINE
// starts one at init()). mark_cycles: also a CYCLE_START instant event at
// the start of every engine cycle of every process set (Horovod's
// start_timeline(path, mark_cycles=True)).
void start_timeline(const std::string& path, bool mark_cycles = false);
void stop_timeline();

// Maps between LibTorch and lockstep element types; throws InvalidArgument
// naming the dtype for unsupported ones.
comm::DataType to_comm_dtype(::torch::ScalarType type);

}  // namespace lockstep::torch
