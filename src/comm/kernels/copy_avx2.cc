// Compiled with -mavx2 (see src/comm/CMakeLists.txt); entered only after a
// runtime check.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace lockstep::comm::kernels::detail {

void copy_streaming_avx2(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  if (head > bytes) head = bytes;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  size_t body = bytes & ~size_t{127};
  for (size_t i = 0; i < body; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
  _mm_sfence();
  std::memcpy(d + body, s + body, bytes - body);
}

}  // namespace lockstep::comm::kernels::detail
