// The engine: asynchronous, negotiated, fused collectives (what Horovod's
// common/ layer does), framework-agnostic.
//
// Usage: construct an Engine over a Communicator (or call the process-wide
// engine::init()), submit operations from any thread, wait on their Handles.
// Every rank must eventually submit the same set of names per process set,
// in any order; the engine agrees one global order (docs/engine.md, Note
// [Negotiation] in src/engine/negotiator.h), fuses small allreduces and runs
// the collectives on background threads: one per process set, each the only
// user of that set's Communicator.
//
// Thread-safety: all methods are thread-safe. Submissions fail fast with
// InvalidArgument (bad arguments, a name already pending in that process set,
// an engine that is shut down). Errors discovered by communicating fail the
// Handle: MismatchError (ranks disagree), TimeoutError (stall timeout),
// DeadlockError (every rank waits for operations others never submitted),
// PeerFailure (a rank died: fails every pending and future operation),
// Aborted (another rank shut the engine down).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/base/knobs.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/engine/handle.h"
#include "lockstep/engine/types.h"

namespace lockstep::engine {

// Defaults are the knob table's (src/base/knobs.cc), read with
// KnobRead::kDefault, so EngineConfig{} equals from_knobs() in an empty
// environment (tested) and no default is written twice.
struct EngineConfig {
  // Bytes; 0 disables fusion (docs/engine.md).
  size_t fusion_threshold = knob_bytes("LOCKSTEP_FUSION_THRESHOLD", KnobRead::kDefault);
  bool deterministic = knob_bool("LOCKSTEP_DETERMINISTIC", KnobRead::kDefault);
  double stall_warning_s = knob_double("LOCKSTEP_STALL_WARNING", KnobRead::kDefault);
  // <= 0: never fail stalled tensors.
  double stall_timeout_s = knob_double("LOCKSTEP_STALL_TIMEOUT", KnobRead::kDefault);
  // Every rank blocked waiting with nothing able to complete for this long
  // fails the set's pending operations with DeadlockError (docs/engine.md,
  // "Deadlocks"); <= 0: off.
  double deadlock_timeout_s = knob_double("LOCKSTEP_DEADLOCK_TIMEOUT", KnobRead::kDefault);
  // Empty: no timeline.
  std::string timeline_path = knob_string("LOCKSTEP_TIMELINE", KnobRead::kDefault);
  bool autotune = knob_bool("LOCKSTEP_AUTOTUNE", KnobRead::kDefault);
  // Timed cycles per candidate threshold.
  size_t autotune_samples =
      static_cast<size_t>(knob_int("LOCKSTEP_AUTOTUNE_SAMPLES", KnobRead::kDefault));
  // Names remembered for the fast path.
  size_t cache_capacity =
      static_cast<size_t>(knob_int("LOCKSTEP_CACHE_CAPACITY", KnobRead::kDefault));
  // Operations the flight recorder keeps (0: off) and where it dumps them
  // (empty: $TMPDIR/lockstep-flight-<job id>); docs/engine.md.
  size_t flight_recorder =
      static_cast<size_t>(knob_int("LOCKSTEP_FLIGHT_RECORDER", KnobRead::kDefault));
  std::string flight_dir = knob_string("LOCKSTEP_FLIGHT_DIR", KnobRead::kDefault);
  // Sets created at init, ids 1, 2, ... in this order (ascending global ranks).
  std::vector<std::vector<int>> process_sets;

  // From the LOCKSTEP_* knobs in the environment.
  static EngineConfig from_knobs();
  bool operator==(const EngineConfig&) const = default;
};

class Engine {
 public:
  // Collective over every rank of `comm`; all ranks pass equivalent configs
  // (rank 0's fusion threshold wins where they differ).
  explicit Engine(std::unique_ptr<comm::Communicator> comm,
                  EngineConfig config = EngineConfig::from_knobs());
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // Calls shutdown().
  ~Engine();

  // Collective-ish: stops the background threads once every rank's engine
  // knows (the first rank to shut down ends the engine for all; their pending
  // operations fail with Aborted). Idempotent; never hangs on a dead peer.
  void shutdown();

  int rank() const;
  int size() const;
  int local_rank() const;
  int local_size() const;
  int cross_rank() const;
  int cross_size() const;
  // The world the engine's communicator spans (what a second communicator
  // over the same ranks, e.g. the device one, is made from).
  const comm::WorldInfo& world() const;

  // output may equal input (in place). Average divides by the number of
  // contributing ranks (ranks that have not joined). Result =
  // postscale * reduce(prescale * input).
  Handle allreduce_async(std::string name, const void* input, void* output, Shape shape,
                         DataType dtype, ReduceOp op = ReduceOp::kSum, double prescale = 1.0,
                         double postscale = 1.0, OpOptions options = {});
  // Several allreduces completing together (one handle); same dtype and op.
  Handle grouped_allreduce_async(const std::vector<std::string>& names,
                                 const std::vector<const void*>& inputs,
                                 const std::vector<void*>& outputs,
                                 const std::vector<Shape>& shapes, DataType dtype,
                                 ReduceOp op = ReduceOp::kSum, double prescale = 1.0,
                                 double postscale = 1.0, OpOptions options = {});
  // Concatenates every rank's input along the first dimension (which may
  // differ per rank); the output is obtained from `allocate`.
  Handle allgather_async(std::string name, const void* input, Shape shape, DataType dtype,
                         Allocator allocate, OpOptions options = {});
  // Several allgathers submitted and negotiated as one group (queued
  // together, announced in one cycle, one handle completing when the last
  // does), as Horovod's grouped_allgather: one dtype and allocator per
  // member. Nothing is queued when any member is invalid.
  Handle grouped_allgather_async(const std::vector<std::string>& names,
                                 const std::vector<const void*>& inputs,
                                 const std::vector<Shape>& shapes,
                                 const std::vector<DataType>& dtypes,
                                 std::vector<Allocator> allocates, OpOptions options = {});
  // In place: buffer holds the root's data afterwards on every rank. root is
  // a rank of the process set (its index in the set's rank list).
  Handle broadcast_async(std::string name, void* buffer, Shape shape, DataType dtype, int root,
                         OpOptions options = {});
  // splits[r] first-dimension rows go to rank r (empty: split evenly).
  Handle alltoall_async(std::string name, const void* input, Shape shape, DataType dtype,
                        std::vector<int64_t> splits, Allocator allocate, OpOptions options = {});
  // Reduces across ranks and gives rank r the r-th slice of the first
  // dimension (the first dim % size ranks get one extra row).
  Handle reduce_scatter_async(std::string name, const void* input, Shape shape, DataType dtype,
                              ReduceOp op, Allocator allocate, OpOptions options = {});
  // Several reduce-scatters as one group, as grouped_allgather_async; one op.
  Handle grouped_reduce_scatter_async(const std::vector<std::string>& names,
                                      const std::vector<const void*>& inputs,
                                      const std::vector<Shape>& shapes,
                                      const std::vector<DataType>& dtypes, ReduceOp op,
                                      std::vector<Allocator> allocates, OpOptions options = {});
  [[deprecated("renamed reduce_scatter_async (one spelling across layers)")]] Handle
  reducescatter_async(std::string name, const void* input, Shape shape, DataType dtype, ReduceOp op,
                      Allocator allocate, OpOptions options = {}) {
    return reduce_scatter_async(std::move(name), input, std::move(shape), dtype, op,
                                std::move(allocate), std::move(options));
  }

  // Blocks until every rank of the set reached the barrier.
  void barrier(int process_set = 0);
  // For uneven data: until every rank joined, the others' collectives run
  // with this rank contributing neutral values (allgather, alltoall,
  // reduce_scatter and a broadcast from a joined root fail with
  // InvalidArgument instead). Returns the last rank to join.
  int join();
  // Collective over all ranks (all pass the same ranks): a new process set.
  int add_process_set(std::vector<int> ranks);
  // Horovod's remove_process_set. Collective over all ranks (all pass the
  // same id, in the same order as their other add/remove calls): the set's
  // members stop its thread and free its communicator; its id is not reused
  // and later submissions to it fail with InvalidArgument. Refused by name
  // (InvalidArgument on every rank alike) for the global set 0, an unknown
  // or already removed id, and while any rank has an operation of the set
  // that has not completed (wait for its handles first). No thread may
  // submit into the set while it is being removed.
  void remove_process_set(int id);

  // Before any OpOptions::memory == kCuda operation, on every rank with
  // equivalent communicators (e.g. all NCCL): the communicator that moves
  // device buffers (docs/gpu.md). The engine owns it and only the global
  // set's thread uses it; host operations keep the engine's communicator.
  // Throws InvalidArgument when one is already set or `comm` is null.
  void set_device_communicator(std::unique_ptr<comm::Communicator> comm);
  bool has_device_communicator() const;

  // Chrome-trace timeline (rank 0 writes; other ranks ignore these).
  // mark_cycles: a CYCLE_START instant event at the start of every
  // negotiation cycle of every process set (Horovod's mark_cycles; busy
  // cycles follow each other within microseconds, idle ones every 100 ms).
  void start_timeline(const std::string& path, bool mark_cycles = false);
  void stop_timeline();

  // The fusion threshold the global set last negotiated (autotune changes it).
  size_t fusion_threshold() const;
  // Asks for a new fusion threshold from the next cycle on; rank 0's request
  // is the one every rank uses. Ignored while autotune runs.
  void set_fusion_threshold(size_t bytes);
  // Autotune finished and settled on fusion_threshold() (false when off).
  bool autotune_converged() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// ---- process-wide engine (Horovod style) ----
// From the environment (lockstep run / mpirun / single process).
void init();
void init(const comm::WorldInfo& world);
void init(std::unique_ptr<comm::Communicator> comm,
          EngineConfig config = EngineConfig::from_knobs());
bool is_initialized();
void shutdown();
// Throws InvalidArgument when init() has not been called.
Engine& global();

int rank();
int size();
int local_rank();
int local_size();
int cross_rank();
int cross_size();

}  // namespace lockstep::engine
