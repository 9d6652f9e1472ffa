#include "comm_nccl/staged_backend.h"

#include <cuda_runtime_api.h>

#include <numeric>
#include <stdexcept>

namespace lockstep::testing {

using comm::DataType;
using comm::ReduceOp;

void poison(comm::DeviceMemory& dm, void* p, size_t bytes) {
  if (bytes == 0) return;
  cudaError_t err = cudaMemsetAsync(p, kPoison, bytes, static_cast<cudaStream_t>(dm.stream()));
  if (err != cudaSuccess) throw std::runtime_error(cudaGetErrorString(err));
}

class StagedBackend::Buffer {
 public:
  Buffer(comm::DeviceMemory& dm, size_t bytes) : dm_(dm), p_(dm.allocate(bytes)) {}
  ~Buffer() {
    try {
      dm_.free(p_);
    } catch (const std::exception&) {
      // The collective's own error is the one the test sees.
    }
  }
  Buffer(Buffer&& o) noexcept : dm_(o.dm_), p_(o.p_) { o.p_ = nullptr; }
  Buffer(const Buffer&) = delete;
  void* get() const { return p_; }

 private:
  comm::DeviceMemory& dm_;
  void* p_;
};

StagedBackend::StagedBackend(std::unique_ptr<comm::Backend> inner)
    : inner_(std::move(inner)), dm_(*inner_->device_memory()) {
  dm_.set_deferred(true);
}

StagedBackend::Buffer StagedBackend::input(const void* host, size_t bytes) {
  Buffer b(dm_, bytes);
  if (host && bytes) dm_.copy(b.get(), host, bytes);
  return b;
}

StagedBackend::Buffer StagedBackend::output(size_t bytes) {
  Buffer b(dm_, bytes);
  poison(dm_, b.get(), bytes);
  return b;
}

// Synchronize first: a copy into pageable memory blocks the host in CUDA,
// outside the backend's deadline, so it must not wait behind a collective.
void StagedBackend::back(void* host, const Buffer& device, size_t bytes) {
  dm_.synchronize();
  if (!host || !bytes) return;
  dm_.copy(host, device.get(), bytes);
  dm_.synchronize();
}

void StagedBackend::allreduce(const void* send, void* recv, size_t count, DataType dtype,
                              ReduceOp op) {
  size_t bytes = count * comm::dtype_size(dtype);
  Buffer in = input(send, bytes);
  if (send == recv) {
    inner_->allreduce(in.get(), in.get(), count, dtype, op);
    return back(recv, in, bytes);
  }
  Buffer out = output(bytes);
  inner_->allreduce(in.get(), out.get(), count, dtype, op);
  back(recv, out, bytes);
}

void StagedBackend::broadcast(void* buffer, size_t count, DataType dtype, int root) {
  size_t bytes = count * comm::dtype_size(dtype);
  Buffer b = rank() == root ? input(buffer, bytes) : output(bytes);
  inner_->broadcast(b.get(), count, dtype, root);
  back(buffer, b, bytes);
}

void StagedBackend::allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                               DataType dtype) {
  size_t es = comm::dtype_size(dtype);
  size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  Buffer in = input(send, counts[rank()] * es);
  Buffer out = output(total * es);
  inner_->allgatherv(in.get(), out.get(), counts, dtype);
  back(recv, out, total * es);
}

void StagedBackend::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                           int root) {
  size_t bytes = count * comm::dtype_size(dtype);
  Buffer in = input(send, bytes);
  Buffer out = output(rank() == root ? bytes : 0);
  inner_->reduce(in.get(), out.get(), count, dtype, op, root);
  back(rank() == root ? recv : nullptr, out, bytes);
}

void StagedBackend::gatherv(const void* send, void* recv, std::span<const size_t> counts,
                            DataType dtype, int root) {
  size_t es = comm::dtype_size(dtype);
  size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  Buffer in = input(send, counts[rank()] * es);
  Buffer out = output(rank() == root ? total * es : 0);
  inner_->gatherv(in.get(), out.get(), counts, dtype, root);
  back(rank() == root ? recv : nullptr, out, total * es);
}

void StagedBackend::scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  size_t bytes = count * comm::dtype_size(dtype);
  Buffer in = input(rank() == root ? send : nullptr, rank() == root ? bytes * size() : 0);
  Buffer out = output(bytes);
  inner_->scatter(in.get(), out.get(), count, dtype, root);
  back(recv, out, bytes);
}

void StagedBackend::reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                                   ReduceOp op) {
  size_t bytes = count * comm::dtype_size(dtype);
  Buffer in = input(send, bytes * size());
  Buffer out = output(bytes);
  inner_->reduce_scatter(in.get(), out.get(), count, dtype, op);
  back(recv, out, bytes);
}

void StagedBackend::alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                              std::span<const size_t> recv_counts, DataType dtype) {
  size_t es = comm::dtype_size(dtype);
  size_t sent = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0}) * es;
  size_t got = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0}) * es;
  Buffer in = input(send, sent);
  Buffer out = output(got);
  inner_->alltoallv(in.get(), send_counts, out.get(), recv_counts, dtype);
  back(recv, out, got);
}

void StagedBackend::send(const void* buffer, size_t count, DataType dtype, int peer, int tag) {
  size_t bytes = count * comm::dtype_size(dtype);
  Buffer in = input(buffer, bytes);
  inner_->send(in.get(), count, dtype, peer, tag);
  dm_.synchronize();
}

void StagedBackend::recv(void* buffer, size_t count, DataType dtype, int peer, int tag) {
  size_t bytes = count * comm::dtype_size(dtype);
  Buffer out = output(bytes);
  inner_->recv(out.get(), count, dtype, peer, tag);
  back(buffer, out, bytes);
}

}  // namespace lockstep::testing
