#include "torch/device.h"

#include <c10/core/Device.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/torch/device.h"

namespace lockstep::torch {

DeviceChoice parse_device(const std::string& text) {
  if (text == "cpu") return DeviceChoice::kCpu;
  if (text == "cuda") return DeviceChoice::kCuda;
  if (text == "auto" || text.empty()) return DeviceChoice::kAuto;
  throw InvalidArgument(fmt::format("LOCKSTEP_DEVICE='{}' is not one of cpu, cuda, auto", text));
}

int plan_gpu(DeviceChoice choice, int local_rank, int visible_gpus) {
  if (choice == DeviceChoice::kCpu || (choice == DeviceChoice::kAuto && visible_gpus == 0))
    return -1;
  if (visible_gpus == 0)
    throw InvalidArgument(
        "LOCKSTEP_DEVICE=cuda but this process sees no GPU (a CPU-only LibTorch, no driver, or "
        "CUDA_VISIBLE_DEVICES hides them); run with LOCKSTEP_DEVICE=cpu or fix the GPU set-up");
  return local_rank % visible_gpus;
}

DeviceBackend choose_device_backend(const DeviceBackendInputs& in) {
  if (in.knob != "auto" && in.knob != "nccl" && in.knob != "host" && !in.knob.empty())
    throw InvalidArgument(
        fmt::format("LOCKSTEP_DEVICE_BACKEND='{}' is not one of auto, nccl, host", in.knob));
  if (in.knob == "host" || !in.cuda) return DeviceBackend::kHost;
  std::string why;
  if (!in.nccl_built)
    why = "this build has no NCCL transport (docs/gpu.md: building with CUDA)";
  else if (in.local_size > in.visible_gpus)
    why = fmt::format("{} workers share {} GPU(s) on this host, and NCCL needs one GPU per worker",
                      in.local_size, in.visible_gpus);
  else if (in.elastic)
    why = "elastic jobs stage CUDA tensors through host memory";
  if (why.empty()) return DeviceBackend::kNccl;
  if (in.knob == "nccl")
    throw InvalidArgument(fmt::format("LOCKSTEP_DEVICE_BACKEND=nccl, but {}; use host", why));
  return DeviceBackend::kHost;
}

}  // namespace lockstep::torch

namespace lockstep::torch::detail {
namespace {

const c10::impl::DeviceGuardImplInterface* cuda_impl() {
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) return nullptr;
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

c10::Device gpu(int index) {
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace

int visible_gpus() {
  const auto* impl = cuda_impl();
  return impl ? static_cast<int>(impl->deviceCount()) : 0;  // deviceCount: 0 without a driver
}

void set_current_gpu(int index) { cuda_impl()->setDevice(gpu(index)); }

std::shared_ptr<void> record_on_current_stream(int index) {
  const auto* impl = cuda_impl();
  void* event = nullptr;
  const auto device_index = static_cast<c10::DeviceIndex>(index);
  impl->record(&event, impl->getStream(gpu(index)), device_index, c10::EventFlag::PYTORCH_DEFAULT);
  return std::shared_ptr<void>(
      event, [impl, device_index](void* e) { impl->destroyEvent(e, device_index); });
}

}  // namespace lockstep::torch::detail
