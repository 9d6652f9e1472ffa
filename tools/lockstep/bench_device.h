// Buffers of `lockstep bench <collective> --device cuda`: the message lives
// in GPU memory. Over a device transport (nccl) the collective reads and
// writes it there; over a host transport (shm, mpi, gloo) every iteration
// stages it as the torch layer does (docs/gpu.md): a copy into pinned host
// memory, the collective, and a copy back, all inside the timed iteration.
// Built with CUDA only (bench_device.cc); elsewhere every call throws
// InvalidArgument naming the build (bench_device_none.cc). Not thread-safe.
#pragma once

#include <cstddef>
#include <memory>

namespace lockstep::cli {

class DeviceBuffers {
 public:
  // `staged`: the transport works on host memory. Makes GPU
  // local_rank % visible GPUs the current device first.
  DeviceBuffers(bool staged, int local_rank);
  ~DeviceBuffers();
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  void resize(size_t in_bytes, size_t out_bytes);  // device (and pinned) buffers, zeroed
  // Where the transport reads and writes.
  void* in();
  void* out();
  // Around each collective: GPU input -> host, host result -> GPU (staged
  // only; no-ops otherwise). Synchronous.
  void before();
  void after();
  // Host <-> the GPU buffers, for checks.
  void upload_in(const void* host, size_t bytes);
  void download_out(void* host, size_t bytes);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::cli
