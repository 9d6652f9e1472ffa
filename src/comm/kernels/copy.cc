#include "comm/kernels/copy.h"

#include <cstring>

namespace lockstep::comm::kernels {
namespace detail {
void copy_streaming_avx2(void* dst, const void* src, size_t bytes);
}

void copy_streaming(void* dst, const void* src, size_t bytes) {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
  }();
  if (avx2 && bytes >= 256)
    detail::copy_streaming_avx2(dst, src, bytes);
  else if (bytes)
    std::memcpy(dst, src, bytes);
}

}  // namespace lockstep::comm::kernels
