#include "comm/transport/nccl/nccl_runtime.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::comm::nccl {

ncclDataType_t to_nccl(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt8: return ncclInt8;
    case DataType::kUInt8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kInt16:
      throw InvalidArgument(
          "nccl backend: NCCL has no int16 type; cast the tensor to int32 on the GPU, or use a "
          "CPU transport (shm, MPI, Gloo), which reduce int16");
  }
  throw InvalidArgument(
      fmt::format("nccl backend: unknown dtype value {}", static_cast<int>(dtype)));
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAverage: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProduct: return ncclProd;
  }
  throw InvalidArgument(
      fmt::format("nccl backend: unknown reduce op value {}", static_cast<int>(op)));
}

void cuda_check(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return;
  throw Error(fmt::format("nccl backend: {}: {} ({})", what, cudaGetErrorString(err),
                          cudaGetErrorName(err)));
}

std::string nccl_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  if (last && *last) text += fmt::format(" ({})", last);
  return text;
}

DeviceGuard::DeviceGuard(int device) {
  int current = -1;
  cuda_check(cudaGetDevice(&current), "cudaGetDevice");
  if (current == device) return;
  cuda_check(cudaSetDevice(device), fmt::format("cudaSetDevice({})", device));
  previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

void check_device_buffer(const void* p, size_t bytes, int device, std::string_view op,
                         std::string_view which) {
  if (bytes == 0) return;
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: the error is the caller's, not the context's
    throw InvalidArgument(
        fmt::format("{}: {} buffer {} is not memory CUDA knows ({}); the nccl "
                    "backend takes device buffers on GPU {}",
                    op, which, p, cudaGetErrorString(err), device));
  }
  if (attr.type == cudaMemoryTypeManaged) return;
  if (attr.type != cudaMemoryTypeDevice)
    throw InvalidArgument(fmt::format(
        "{}: {} buffer {} is host memory; the nccl backend takes device buffers on GPU {} "
        "(Backend::memory() is kCuda: stage host data through DeviceMemory::copy)",
        op, which, p, device));
  if (attr.device != device)
    throw InvalidArgument(
        fmt::format("{}: {} buffer {} is on GPU {} but this nccl backend runs "
                    "on GPU {}",
                    op, which, p, attr.device, device));
}

}  // namespace lockstep::comm::nccl
