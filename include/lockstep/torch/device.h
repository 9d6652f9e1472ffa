// The GPU choices of a worker, pure functions of what the process sees:
// which GPU it computes on (LOCKSTEP_DEVICE) and how its CUDA tensors travel
// (LOCKSTEP_DEVICE_BACKEND). placement.h places the CPUs and applies these;
// init() calls them (docs/gpu.md). Thread-safe: nothing here has state.
//
// LOCKSTEP_DEVICE = cpu | cuda | auto (auto: cuda when LibTorch sees a GPU):
// worker local_rank computes on visible GPU local_rank % visible GPUs
// (CUDA_VISIBLE_DEVICES is respected: indices count the visible devices
// only), which init() makes the process's current device. More workers than
// GPUs on a host share them round robin; their CUDA tensors then travel over
// the host transport (docs/gpu.md).
#pragma once

#include <string>

namespace lockstep::torch {

enum class DeviceChoice { kCpu, kCuda, kAuto };
DeviceChoice parse_device(const std::string& text);  // throws InvalidArgument naming the knob
// Pure: the GPU worker local_rank computes on among `visible_gpus`, or -1 for
// the CPU. Throws InvalidArgument when kCuda is asked for and none is visible.
int plan_gpu(DeviceChoice choice, int local_rank, int visible_gpus);

// How CUDA tensors travel (LOCKSTEP_DEVICE_BACKEND; Note [Which way a CUDA
// tensor travels] in src/torch/collectives.cc).
enum class DeviceBackend { kHost, kNccl };
struct DeviceBackendInputs {
  std::string knob = "auto";  // LOCKSTEP_DEVICE_BACKEND: auto | nccl | host
  bool nccl_built = false;    // this build has the NCCL transport
  bool cuda = false;          // the workers compute on GPUs
  int local_size = 1;         // workers on this host
  int visible_gpus = 0;       // GPUs each worker sees
  bool elastic = false;       // an elastic job (its world changes)
};
// Pure: nccl only with NCCL built, CUDA placement, one GPU per worker of a
// host and a fixed world; auto picks nccl exactly then. Throws
// InvalidArgument naming the reason when nccl is asked for and cannot be.
DeviceBackend choose_device_backend(const DeviceBackendInputs& in);

}  // namespace lockstep::torch
