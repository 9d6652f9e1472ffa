// Device memory of a backend whose buffers live on a GPU (the NCCL
// transport), without any CUDA type in the interface: streams, events and
// pointers are opaque here, so the comm layer's public headers compile
// without the CUDA toolkit.
//
// Note [Device buffers]
// A Backend says where its buffers must live (Backend::memory()): kHost for
// shm, mpi and gloo; kCuda for nccl, whose collectives take device pointers
// on the GPU the backend was created on (DeviceMemory::device()). Every
// operation below runs on the backend's own stream, in submission order with
// the backend's collectives. Typical engine use, with no host
// synchronisation per collective:
//
//   DeviceMemory& dm = *backend.device_memory();
//   dm.wait_event(producer_event);   // the stream waits for the producer's work
//   dm.copy(fusion, grad, bytes);    // pack, on the backend stream
//   backend.allreduce(fusion, fusion, n, dtype, op);  // enqueued (deferred mode)
//   dm.copy(grad, fusion, bytes);    // unpack
//   dm.synchronize();                // once: host waits, errors surface here
//
// with DeviceMemory::set_deferred(true) set once beforehand. Without it
// (the default) each collective waits for its own completion, so host code
// written for host backends stays correct on device buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lockstep/comm/types.h"

namespace lockstep::comm {

enum class MemoryKind : uint8_t { kHost, kCuda };

// Device-side memory operations of a backend. Owned by the backend (valid
// while it lives). Not thread-safe: one caller at a time, the same one that
// drives the backend (the engine's thread). May be called from a different
// thread than the one that created the backend: it makes the backend's
// device current itself.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // The CUDA ordinal the backend's buffers and stream live on.
  virtual int device() const = 0;
  // The backend's stream (a cudaStream_t), for a caller that wants to record
  // its own events on it or order its work after the collectives.
  virtual void* stream() const = 0;

  // `bytes` of device memory on device() (cudaMalloc; synchronous). The
  // caller owns it and releases it with free(). Throws lockstep::Error when
  // the device is out of memory, naming the size. allocate(0) returns null.
  virtual void* allocate(size_t bytes) = 0;
  // Releases memory from allocate() once the stream's work on it is done
  // (the stream is synchronised first, under the deadline; after an abort
  // it is released at once). free(nullptr) does nothing.
  virtual void free(void* p) = 0;

  // Enqueued on the backend's stream (return before the work is done):
  // a copy of `bytes` between any two of host, device and pinned memory
  // (cudaMemcpyAsync, cudaMemcpyDefault; pageable host memory makes it
  // synchronous, as CUDA does);
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // zeroes `bytes` at device address `dst` (cudaMemsetAsync);
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // makes the stream wait for `cuda_event` (a cudaEvent_t recorded by the
  // producer on its stream) without blocking the host (cudaStreamWaitEvent).
  virtual void wait_event(void* cuda_event) = 0;
  // records `cuda_event` (a cudaEvent_t the caller created) on the stream,
  // so the caller's stream can wait for the collectives enqueued so far.
  virtual void record_event(void* cuda_event) = 0;

  // Collective: a sum allreduce of `count` elements in which every rank's
  // contribution is multiplied by `factor` first (NCCL's pre-multiplied sum),
  // so the engine's prescale, postscale and average cost no extra pass over
  // the data. Enqueued like the other collectives (deferred mode applies).
  virtual void allreduce_scaled(const void* send, void* recv, size_t count, DataType dtype,
                                double factor) = 0;

  // Deferred mode, off by default: collectives (all but barrier) return once
  // enqueued on the stream instead of waiting for completion; their results
  // are ready after synchronize(), or for work ordered after record_event().
  // Errors of enqueued work (a dead peer, a deadline) surface at the next
  // wait: synchronize(), barrier() or a non-deferred collective.
  virtual void set_deferred(bool deferred) = 0;
  virtual bool deferred() const = 0;

  // The host waits for everything enqueued on the stream, with the backend's
  // deadline (LOCKSTEP_TIMEOUT) and error checks: a dead peer raises
  // PeerFailure, a deadline TimeoutError, a CUDA or NCCL error lockstep::Error,
  // each naming the oldest operation still pending. Never hangs.
  virtual void synchronize() = 0;

  // Timing marks, for the timeline's GPU times (Note [Device batches] in
  // src/engine/executor_device.cc): mark() records a timing event on the
  // stream (pooled, no allocation once warm). After synchronize(),
  // take_marks() returns, for each mark since the last take_marks(), its
  // GPU time in seconds after the first of them (so the first is 0), and
  // forgets them. A backend that cannot time keeps the defaults: marks
  // cost nothing and take_marks() is empty (the timeline keeps host times).
  virtual void mark() {}
  virtual std::vector<double> take_marks() { return {}; }
};

}  // namespace lockstep::comm
