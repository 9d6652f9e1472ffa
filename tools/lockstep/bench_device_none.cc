// DeviceBuffers in a build without CUDA (bench_device.h).
#include "tools/lockstep/bench_device.h"

#include "lockstep/base/error.h"

namespace lockstep::cli {

struct DeviceBuffers::Impl {};

DeviceBuffers::DeviceBuffers(bool, int) {
  throw InvalidArgument(
      "--device cuda: this lockstep was built without CUDA (LOCKSTEP_WITH_CUDA=OFF; docs/gpu.md)");
}
DeviceBuffers::~DeviceBuffers() = default;
void DeviceBuffers::resize(size_t, size_t) {}
void* DeviceBuffers::in() { return nullptr; }
void* DeviceBuffers::out() { return nullptr; }
void DeviceBuffers::before() {}
void DeviceBuffers::after() {}
void DeviceBuffers::upload_in(const void*, size_t) {}
void DeviceBuffers::download_out(void*, size_t) {}

}  // namespace lockstep::cli
