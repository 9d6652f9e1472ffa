// The transport interface behind Communicator.
//
// A Backend moves bytes between the ranks of one job. It is called only by
// Communicator, after the arguments have been validated locally, so
// implementations may assume non-null buffers for non-zero counts, valid
// dtypes/ops and roots in range. Backends are responsible for what only they
// can see: cross-rank disagreement (MismatchError), dead peers (PeerFailure)
// and deadlines (TimeoutError). Not thread-safe: one caller at a time.
// Counts are in elements; vectors of counts are packed (no displacements).
//
// Primitives (pure virtual): allreduce, broadcast, allgatherv, barrier, send,
// recv. The derived collectives (reduce, gatherv, scatter, reduce_scatter,
// alltoallv) have correct default implementations on those primitives
// (src/comm/collectives/, one file each, their costs stated there), so a new
// transport works once it has the six primitives; it overrides a derived one
// where it can be faster. A default reports a mismatch through the
// primitive it runs on (its count, dtype and root are still compared; a
// derived call against that very primitive with agreeing arguments is not an
// error, and still gives every rank the right result).
#pragma once

#include <atomic>
#include <cstddef>
#include <span>
#include <string_view>

#include "lockstep/comm/device.h"
#include "lockstep/comm/types.h"

namespace lockstep::comm {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;  // "shm", "mpi", "gloo", ...
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A collective on a backend sharing this job failed (hierarchical stages):
  // this one must not wait for its peers any more, e.g. in a goodbye barrier
  // at destruction, since they may be gone. Later calls may fail.
  virtual void abandon() {}
  // A hint from the caller: while `*blocked` > 0 the calling process's other
  // threads are blocked on this backend's results, so its cores have nothing
  // else to run and a wait for a peer may busy-wait longer
  // (LOCKSTEP_IDLE_SPIN_US) instead of sleeping: waking a sleeper costs
  // 25-50 us on a VM. nullptr turns it off. Correctness never depends on it;
  // `*blocked` must outlive the backend or be unset first.
  virtual void set_idle_probe(const std::atomic<int>* blocked) { (void)blocked; }

  // Where the buffers passed to this backend must live (Note [Device
  // buffers] in device.h): host memory, or device memory of the GPU that
  // device_memory()->device() names.
  virtual MemoryKind memory() const { return MemoryKind::kHost; }
  // The device-side operations of a kCuda backend (owned by it); null for a
  // host backend.
  virtual DeviceMemory* device_memory() { return nullptr; }
  // The algorithm an allreduce (`root_only`: a reduce) of `bytes` in
  // elements of `elem_bytes` runs here, as timelines and benchmarks name it
  // (shm: policy::ShmChoice::name()); "" where the transport does not say.
  // Thread-safe.
  virtual std::string allreduce_algorithm(size_t bytes, size_t elem_bytes, bool root_only) const {
    (void)bytes, (void)elem_bytes, (void)root_only;
    return {};
  }

  // `send == recv` means in place everywhere it is allowed.
  virtual void allreduce(const void* send, void* recv, size_t count, DataType dtype,
                         ReduceOp op) = 0;
  virtual void broadcast(void* buffer, size_t count, DataType dtype, int root) = 0;
  virtual void allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                          DataType dtype) = 0;
  virtual void barrier() = 0;

  // Derived collectives, with defaults on the primitives.
  virtual void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                      int root);
  virtual void gatherv(const void* send, void* recv, std::span<const size_t> counts, DataType dtype,
                       int root);
  virtual void scatter(const void* send, void* recv, size_t count, DataType dtype, int root);
  // Input holds size() blocks of `count` elements; rank r gets block r reduced.
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                              ReduceOp op);
  virtual void alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                         std::span<const size_t> recv_counts, DataType dtype);

  // Point-to-point primitives.
  virtual void send(const void* buffer, size_t count, DataType dtype, int peer, int tag) = 0;
  virtual void recv(void* buffer, size_t count, DataType dtype, int peer, int tag) = 0;
};

}  // namespace lockstep::comm
