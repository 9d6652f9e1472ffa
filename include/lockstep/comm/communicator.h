// Communicator: blocking collectives among the ranks of one job.
//
// Thread-safety: one thread at a time per Communicator (the engine gives it a
// dedicated thread). Every call validates its arguments before communicating
// and throws InvalidArgument naming the op and the argument. Every wait has a
// deadline (LOCKSTEP_TIMEOUT); a dead peer fails the call on every survivor
// with PeerFailure naming that rank; ranks that disagree (different counts,
// dtypes, ops or roots) get MismatchError where the transport can see it.
//
// Buffers are caller-owned. Counts are element counts. Pass the same pointer
// as send and recv for in-place operation.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/types.h"
#include "lockstep/comm/world.h"

namespace lockstep::comm {

class Communicator {
 public:
  // Picks the backend from LOCKSTEP_BACKEND (auto: shared memory when all
  // ranks are on one host) and connects to the peers; rank 0 logs the choice.
  static std::unique_ptr<Communicator> create(const WorldInfo& world);
  static std::unique_ptr<Communicator> create(const WorldInfo& world, std::string_view backend);
  // Communicator for the world described by the environment (lockstep run,
  // mpirun, srun, or a single process).
  static std::unique_ptr<Communicator> from_environment();
  // Whether this build has the transport `name` ("shm", "nccl", ...).
  static bool has_backend(std::string_view name);

  Communicator(WorldInfo world, std::unique_ptr<Backend> backend);
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  int rank() const { return world_.rank; }
  int size() const { return world_.size; }
  const WorldInfo& world() const { return world_; }
  std::string_view backend_name() const { return backend_->name(); }
  Backend& backend() { return *backend_; }
  // Where buffers must live, and the device operations of a GPU backend
  // (null for host backends): Note [Device buffers] in device.h.
  MemoryKind memory() const { return backend_->memory(); }
  DeviceMemory* device_memory() { return backend_->device_memory(); }

  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  void allreduce(void* buffer, size_t count, DataType dtype, ReduceOp op) {
    allreduce(buffer, buffer, count, dtype, op);
  }
  // Result only on root; recv may be null elsewhere.
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root);
  void broadcast(void* buffer, size_t count, DataType dtype, int root);
  // recv holds size() * count elements, rank order.
  void allgather(const void* send, void* recv, size_t count, DataType dtype);
  // recv_counts[r] elements from rank r, packed in rank order; this rank sends
  // recv_counts[rank()] elements.
  void allgatherv(const void* send, void* recv, std::span<const size_t> recv_counts,
                  DataType dtype);
  // recv (size() * count elements) needed only on root.
  void gather(const void* send, void* recv, size_t count, DataType dtype, int root);
  // send (size() * count elements) needed only on root.
  void scatter(const void* send, void* recv, size_t count, DataType dtype, int root);
  // send holds size() * recv_count elements; rank r receives block r, reduced.
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType dtype, ReduceOp op);
  // count elements to and from each rank.
  void alltoall(const void* send, void* recv, size_t count, DataType dtype);
  void alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                 std::span<const size_t> recv_counts, DataType dtype);
  void barrier();
  // Point-to-point, matched in order per (sender, receiver) pair; tags must
  // agree or the receive fails with MismatchError.
  void send(const void* buffer, size_t count, DataType dtype, int dst, int tag = 0);
  void recv(void* buffer, size_t count, DataType dtype, int src, int tag = 0);

  // A communicator over a subset of this job's ranks (given as global ranks,
  // ascending, no repeats). Called by exactly the member ranks, all with the
  // same `ranks` and `tag`; `tag` must be unique per subset within the job
  // (the engine's process-set id, for instance). Non-members must not call.
  std::unique_ptr<Communicator> split(std::span<const int> ranks, std::string_view tag);

 private:
  WorldInfo world_;
  std::unique_ptr<Backend> backend_;
};

}  // namespace lockstep::comm
