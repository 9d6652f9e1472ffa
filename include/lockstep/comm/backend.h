// The transport interface behind Communicator.
//
// A Backend moves bytes between the ranks of one job. It is called only by
// Communicator, after the arguments have been validated locally, so
// implementations may assume non-null buffers for non-zero counts, valid
// dtypes/ops and roots in range. Backends are responsible for what only they
// can see: cross-rank disagreement (MismatchError), dead peers (PeerFailure)
// and deadlines (TimeoutError). Not thread-safe: one caller at a time.
// Counts are in elements; vectors of counts are packed (no displacements).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

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

  // `send == recv` means in place everywhere it is allowed.
  virtual void allreduce(const void* send, void* recv, size_t count, DataType dtype,
                         ReduceOp op) = 0;
  virtual void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                      int root) = 0;
  virtual void broadcast(void* buffer, size_t count, DataType dtype, int root) = 0;
  virtual void allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                          DataType dtype) = 0;
  virtual void gatherv(const void* send, void* recv, std::span<const size_t> counts,
                       DataType dtype, int root) = 0;
  virtual void scatter(const void* send, void* recv, size_t count, DataType dtype,
                       int root) = 0;
  // Input holds size() blocks of `count` elements; rank r gets block r reduced.
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                              ReduceOp op) = 0;
  virtual void alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                         std::span<const size_t> recv_counts, DataType dtype) = 0;
  virtual void barrier() = 0;
  virtual void send(const void* buffer, size_t count, DataType dtype, int peer, int tag) = 0;
  virtual void recv(void* buffer, size_t count, DataType dtype, int peer, int tag) = 0;
};

}  // namespace lockstep::comm
