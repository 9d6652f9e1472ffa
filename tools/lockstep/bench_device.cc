#include "tools/lockstep/bench_device.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::cli {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(fmt::format("lockstep bench --device cuda: {} failed: {}", what,
                            cudaGetErrorString(status)));
}

}  // namespace

struct DeviceBuffers::Impl {
  bool staged = false;
  void* d_in = nullptr;
  void* d_out = nullptr;
  void* h_in = nullptr;  // pinned, staged only
  void* h_out = nullptr;
  size_t in_bytes = 0, out_bytes = 0;

  void release() {
    cudaFree(d_in);
    cudaFree(d_out);
    cudaFreeHost(h_in);
    cudaFreeHost(h_out);
    d_in = d_out = h_in = h_out = nullptr;
  }
};

DeviceBuffers::DeviceBuffers(bool staged, int local_rank) : impl_(std::make_unique<Impl>()) {
  impl_->staged = staged;
  int gpus = 0;
  check(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
  if (gpus == 0) throw InvalidArgument("--device cuda: no GPU is visible to this process");
  check(cudaSetDevice(local_rank % gpus), "cudaSetDevice");
}

DeviceBuffers::~DeviceBuffers() { impl_->release(); }

void DeviceBuffers::resize(size_t in_bytes, size_t out_bytes) {
  impl_->release();
  // One extra byte: a zero-byte message still gets a valid pointer.
  impl_->in_bytes = in_bytes;
  impl_->out_bytes = out_bytes;
  check(cudaMalloc(&impl_->d_in, in_bytes + 1), "cudaMalloc");
  check(cudaMalloc(&impl_->d_out, out_bytes + 1), "cudaMalloc");
  check(cudaMemset(impl_->d_in, 0, in_bytes + 1), "cudaMemset");
  check(cudaMemset(impl_->d_out, 0, out_bytes + 1), "cudaMemset");
  if (impl_->staged) {
    check(cudaMallocHost(&impl_->h_in, in_bytes + 1), "cudaMallocHost");
    check(cudaMallocHost(&impl_->h_out, out_bytes + 1), "cudaMallocHost");
  }
}

void* DeviceBuffers::in() { return impl_->staged ? impl_->h_in : impl_->d_in; }
void* DeviceBuffers::out() { return impl_->staged ? impl_->h_out : impl_->d_out; }

void DeviceBuffers::before() {
  if (impl_->staged)
    check(cudaMemcpy(impl_->h_in, impl_->d_in, impl_->in_bytes, cudaMemcpyDeviceToHost),
          "staging copy to the host");
}

void DeviceBuffers::after() {
  if (impl_->staged)
    check(cudaMemcpy(impl_->d_out, impl_->h_out, impl_->out_bytes, cudaMemcpyHostToDevice),
          "staging copy to the GPU");
}

void DeviceBuffers::upload_in(const void* host, size_t bytes) {
  check(cudaMemcpy(impl_->d_in, host, bytes, cudaMemcpyHostToDevice), "upload");
}

void DeviceBuffers::download_out(void* host, size_t bytes) {
  check(cudaMemcpy(host, impl_->d_out, bytes, cudaMemcpyDeviceToHost), "download");
}

}  // namespace lockstep::cli
