// CUDA seen through LibTorch's device-guard interface
// (c10/core/impl/DeviceGuardImplInterface.h) instead of the CUDA headers, so
// the torch layer compiles the same against a CPU-only LibTorch (Debian's)
// and a CUDA one. Nothing here runs unless a CUDA placement or a CUDA tensor
// exists. Thread-safe (LibTorch's guard implementations are).
// device.cc also defines the pure GPU choices declared in
// lockstep/torch/device.h (parse_device, plan_gpu, choose_device_backend).
#pragma once

#include <memory>

namespace lockstep::torch::detail {

// GPUs this process sees (CUDA_VISIBLE_DEVICES applies); 0 when LibTorch has
// no CUDA or no driver.
int visible_gpus();
// Makes GPU `index` the calling thread's current device (threads started
// later inherit nothing: the engine's thread sets its own, docs/gpu.md).
void set_current_gpu(int index);
// An event recorded on GPU `index`'s current LibTorch stream: once a stream
// waits for it, everything queued there before the call is done. Destroyed
// when the last copy goes.
std::shared_ptr<void> record_on_current_stream(int index);

}  // namespace lockstep::torch::detail
