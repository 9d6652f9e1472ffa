#include "torch/device.h"

#include <c10/core/Device.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

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
  impl->record(&event, impl->getStream(gpu(index)), device_index,
               c10::EventFlag::PYTORCH_DEFAULT);
  return std::shared_ptr<void>(event, [impl, device_index](void* e) {
    impl->destroyEvent(e, device_index);
  });
}

}  // namespace lockstep::torch::detail
