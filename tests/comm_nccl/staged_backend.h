// A host-buffer Backend over a device-buffer one (the NCCL backend), so the
// shared collective matrix (support/collective_matrix.h), written for host
// buffers, runs on NCCL unchanged.
//
// Each call copies its host inputs into fresh device buffers, fills the
// device outputs with a poison byte (so a collective that writes nothing
// fails the comparison), runs the inner collective in deferred mode (no
// wait) and synchronizes once, the path the engine takes, then copies the
// outputs back. In-place calls stay in place on the device. Test-only; not
// thread-safe, like the Backend it wraps.
#pragma once

#include <memory>

#include "lockstep/comm/backend.h"

namespace lockstep::testing {

class StagedBackend final : public comm::Backend {
 public:
  // `inner` must be a kCuda backend.
  explicit StagedBackend(std::unique_ptr<comm::Backend> inner);

  std::string_view name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void abandon() override { inner_->abandon(); }
  comm::Backend& inner() { return *inner_; }

  void allreduce(const void* send, void* recv, size_t count, comm::DataType dtype,
                 comm::ReduceOp op) override;
  void broadcast(void* buffer, size_t count, comm::DataType dtype, int root) override;
  void allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                  comm::DataType dtype) override;
  void barrier() override { inner_->barrier(); }
  void reduce(const void* send, void* recv, size_t count, comm::DataType dtype, comm::ReduceOp op,
              int root) override;
  void gatherv(const void* send, void* recv, std::span<const size_t> counts, comm::DataType dtype,
               int root) override;
  void scatter(const void* send, void* recv, size_t count, comm::DataType dtype, int root) override;
  void reduce_scatter(const void* send, void* recv, size_t count, comm::DataType dtype,
                      comm::ReduceOp op) override;
  void alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                 std::span<const size_t> recv_counts, comm::DataType dtype) override;
  void send(const void* buffer, size_t count, comm::DataType dtype, int peer, int tag) override;
  void recv(void* buffer, size_t count, comm::DataType dtype, int peer, int tag) override;

 private:
  class Buffer;
  Buffer input(const void* host, size_t bytes);
  Buffer output(size_t bytes);
  void back(void* host, const Buffer& device, size_t bytes);

  std::unique_ptr<comm::Backend> inner_;
  comm::DeviceMemory& dm_;
};

// Fills `bytes` at device address `p` with the poison byte on `dm`'s stream.
void poison(comm::DeviceMemory& dm, void* p, size_t bytes);
inline constexpr unsigned char kPoison = 0xA5;

}  // namespace lockstep::testing
