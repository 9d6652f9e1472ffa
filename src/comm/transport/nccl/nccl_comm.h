// Internal: the NCCL Backend implementation (see nccl_backend.h).
//
// One object is both the Backend and its DeviceMemory (device_memory()
// returns this): both run on the same stream and share the deferred-work
// bookkeeping.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/kit/op_desc.h"
#include "comm/transport/nccl/nccl_runtime.h"
#include "comm/transport/nccl/nccl_watchdog.h"
#include "lockstep/comm/backend.h"
#include "lockstep/comm/device.h"
#include "lockstep/comm/world.h"

namespace lockstep::comm::nccl {

// What each rank tells the others at start-up (fixed size: exchanged as
// bytes through the host communicator).
struct PeerRecord {
  int64_t pid = 0;
  int32_t device = -1;
  char host[128] = {};
  char bus_id[32] = {};  // PCI bus id of the GPU: equal means the same GPU
};

// The backend over `world` from an id every rank holds and every rank's
// record (nccl_bootstrap.cc): checks one GPU per rank, then initializes the
// communicator under the watchdog. `device` must be current.
std::unique_ptr<Backend> connect(const WorldInfo& world, int device, const ncclUniqueId& id,
                                 std::vector<PeerRecord> peers);

class NcclBackend final : public Backend, public DeviceMemory {
 public:
  // Takes the initialized communicator (in `watchdog`) on `device`, which
  // must be current. Creates the stream, its event and a small scratch
  // buffer.
  NcclBackend(std::unique_ptr<Watchdog> watchdog, int device, int rank, int size, bool verify_ops,
              std::vector<PeerRecord> peers);
  // Waits (bounded) for enqueued work, then finalizes the communicator.
  ~NcclBackend() override;

  // Backend.
  std::string_view name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void abandon() override;
  MemoryKind memory() const override { return MemoryKind::kCuda; }
  DeviceMemory* device_memory() override { return this; }

  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override;
  void broadcast(void* buffer, size_t count, DataType dtype, int root) override;
  void allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                  DataType dtype) override;
  void barrier() override;
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
              int root) override;
  void gatherv(const void* send, void* recv, std::span<const size_t> counts, DataType dtype,
               int root) override;
  void scatter(const void* send, void* recv, size_t count, DataType dtype, int root) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                      ReduceOp op) override;
  void alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                 std::span<const size_t> recv_counts, DataType dtype) override;
  void send(const void* buffer, size_t count, DataType dtype, int peer, int tag) override;
  void recv(void* buffer, size_t count, DataType dtype, int peer, int tag) override;

  // The backend over `ranks` (indices into this one; Transport::make_subset,
  // called by exactly the members): the first member's new ncclUniqueId
  // reaches the others over this communicator, point to point among the
  // members only, so it works across hosts without a new rendezvous.
  std::unique_ptr<Backend> subset(std::span<const int> ranks, const WorldInfo& sub);

  // DeviceMemory.
  int device() const override { return device_; }
  void* stream() const override { return stream_; }
  void* allocate(size_t bytes) override;
  void free(void* p) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void wait_event(void* cuda_event) override;
  void record_event(void* cuda_event) override;
  void allreduce_scaled(const void* send, void* recv, size_t count, DataType dtype,
                        double factor) override;
  void allreduce_with(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                      const double* factor);
  void set_deferred(bool deferred) override { deferred_ = deferred; }
  bool deferred() const override { return deferred_; }
  void synchronize() override;
  void mark() override;
  std::vector<double> take_marks() override;

 private:
  // Every collective, after its DeviceGuard and argument checks: checks the
  // communicator is usable and, under LOCKSTEP_VERIFY_OPS, compares `desc`
  // across ranks (MismatchError on every rank).
  void begin(const kit::OpDesc& desc);
  // The result of an NCCL call (or group) on the non-blocking communicator.
  void enqueued(std::string_view what, ncclResult_t result);
  // A CUDA call enqueuing work on the stream.
  void cuda(std::string_view what, cudaError_t err);
  // After a collective: waits for it unless deferred.
  void finish();
  // Host waits for everything enqueued (with the watchdog's checks).
  void wait_stream(std::string_view what);
  // Like wait_stream, giving up after `limit` (destruction).
  void wait_stream_for(std::string_view what, std::chrono::milliseconds limit);
  // Records that `what` was enqueued (pending_).
  void note(std::string_view what);
  void verify(const kit::OpDesc& desc);
  // Copies `bytes` from `src` to `dst` on the stream (device to device).
  void local_copy(void* dst, const void* src, size_t bytes);

  std::unique_ptr<Watchdog> watchdog_;
  std::vector<PeerRecord> peers_;
  int device_;
  int rank_;
  int size_;
  bool verify_ops_;
  bool deferred_ = false;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* scratch_ = nullptr;  // barrier word and descriptor table
  // Timing events (cudaEventDefault: timed), reused; marks_used_ of them
  // are recorded since the last take_marks().
  std::vector<cudaEvent_t> marks_;
  size_t marks_used_ = 0;
  // The oldest operation enqueued since the last completed wait ("" when
  // none), how many more followed it, and when it was enqueued.
  std::string pending_;
  int pending_more_ = 0;
  Clock::time_point pending_since_{};
};

}  // namespace lockstep::comm::nccl
