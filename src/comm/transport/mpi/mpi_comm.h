// Internal: the MPI Backend implementation (see mpi_backend.h).
#pragma once

#include <mpi.h>

#include <memory>
#include <string_view>
#include <vector>

#include "comm/transport/mpi/mpi_watchdog.h"
#include "lockstep/comm/backend.h"

namespace lockstep::comm::mpi {

class MpiBackend final : public Backend {
 public:
  // Takes ownership of `comm` (freed in the destructor). Collective.
  MpiBackend(MPI_Comm comm, kit::WaitPolicy policy, bool verify_ops);
  ~MpiBackend() override;

  std::string_view name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm comm() const { return comm_; }
  // Sub-communicators wait the same way as their parent.
  const kit::WaitPolicy& policy() const { return policy_; }

  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override;
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
              int root) override;
  void broadcast(void* buffer, size_t count, DataType dtype, int root) override;
  void allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                  DataType dtype) override;
  void gatherv(const void* send, void* recv, std::span<const size_t> counts, DataType dtype,
               int root) override;
  void scatter(const void* send, void* recv, size_t count, DataType dtype, int root) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                      ReduceOp op) override;
  void alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                 std::span<const size_t> recv_counts, DataType dtype) override;
  void barrier() override;
  void send(const void* buffer, size_t count, DataType dtype, int peer, int tag) override;
  void recv(void* buffer, size_t count, DataType dtype, int peer, int tag) override;

 private:
  // Announces the collective; with verify_ops_ also compares descriptors
  // across all ranks first (one small allgather) so a mismatch fails cleanly.
  void begin(const kit::OpDesc& desc);
  void verify(const kit::OpDesc& mine);
  void wait(MPI_Request& req, std::string_view what) { watchdog_.wait(req, what); }
  // Integer averages summed in int64 (mpi_types.h).
  void wide_average(const void* send, void* recv, size_t in_count, size_t out_count, DataType dtype,
                    int root, kit::OpKind kind);
  // Displacements for a v-collective; throws beyond MPI's int range.
  std::vector<int> to_ints(std::span<const size_t> counts, const char* what) const;
  std::vector<int> displacements(std::span<const int> counts, const char* what) const;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  bool verify_ops_ = false;
  kit::WaitPolicy policy_;
  Watchdog watchdog_;
};

}  // namespace lockstep::comm::mpi
