// Internal: the CUDA and NCCL glue of the nccl transport: type mapping,
// error text, the current-device guard and the buffer check. Stateless
// helpers; DeviceGuard is a scope object of one thread.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "lockstep/comm/types.h"

namespace lockstep::comm::nccl {

ncclDataType_t to_nccl(DataType dtype);
// kAverage is ncclAvg: NCCL divides after summing for integer types
// (truncating, as lockstep does, but the sum is in the element type: an
// overflowing i8/u8/i32 sum wraps, where the host transports sum in int64)
// and pre-multiplies by 1/n for floating types.
ncclRedOp_t to_nccl(ReduceOp op);

// Throws lockstep::Error "nccl backend: <what>: <CUDA's text> (<name>)"
// unless `err` is cudaSuccess.
void cuda_check(cudaError_t err, std::string_view what);
// NCCL's text for `result`, with the communicator's last error when it has
// one (comm may be null).
std::string nccl_text(ncclResult_t result, ncclComm_t comm);

// Makes `device` current for the scope (when it is not already) and
// restores the caller's device after: the engine calls the backend from its
// own thread, whose current device is whatever CUDA defaulted it to.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

// Runs `body(keep)` between ncclGroupStart and ncclGroupEnd; `keep` records
// the first failing call. Returns that failure, else ncclGroupEnd's result
// (ncclGroupEnd must run even after a failure, or the group stays open).
template <typename Body>
ncclResult_t grouped(Body&& body) {
  ncclResult_t first = ncclGroupStart();
  if (first != ncclSuccess) return first;
  body([&](ncclResult_t r) {
    if (first == ncclSuccess && r != ncclSuccess) first = r;
  });
  ncclResult_t end = ncclGroupEnd();
  return first != ncclSuccess ? first : end;
}

// Throws InvalidArgument naming `op`, `which` buffer and the problem unless
// `p` is device (or managed) memory usable on `device`. Null with bytes == 0
// passes.
void check_device_buffer(const void* p, size_t bytes, int device, std::string_view op,
                         std::string_view which);

}  // namespace lockstep::comm::nccl
