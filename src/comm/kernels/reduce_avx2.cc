// AVX2 + F16C build of the shared kernel bodies (compiled with -mavx2 -mf16c).
#include <immintrin.h>

#include "comm/kernels/reduce_impl.h"

namespace lockstep::comm::kernels {
namespace {

struct F16Hardware : impl::BF16 {
  static Acc load(Store v) { return _cvtsh_ss(v); }
  static Store store(Acc v) { return _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT); }

  // Two inputs, eight lanes at a time (Note [Two-input reduction]): the
  // same conversions, f32 operation and rounding as load/apply/store, lane
  // by lane; min/max as `v < acc ? v : acc` (vminps/vmaxps with the peer's
  // value first). Returns the elements done; reduce_two finishes the tail.
  template <impl::Kind K>
  static size_t two(const Store* a, const Store* b, Store* o, size_t count, bool average,
                    int divisor) {
    const __m256 d = _mm256_set1_ps(static_cast<float>(divisor));
    size_t i = 0;
    for (; i + 8 <= count; i += 8) {
      __m256 acc = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
      __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
      if constexpr (K == impl::Kind::kSum) acc = _mm256_add_ps(acc, v);
      if constexpr (K == impl::Kind::kProduct) acc = _mm256_mul_ps(acc, v);
      if constexpr (K == impl::Kind::kMin) acc = _mm256_min_ps(v, acc);
      if constexpr (K == impl::Kind::kMax) acc = _mm256_max_ps(v, acc);
      if (average) acc = _mm256_div_ps(acc, d);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i),
                       _mm256_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT));
    }
    return i;
  }
};

}  // namespace

void detail::reduce_avx2(DataType dtype, ReduceOp op, const void* const* in, int n, void* out,
                         size_t count, int divisor) {
  impl::reduce_dispatch<F16Hardware>(dtype, op, in, n, out, count, divisor);
}

}  // namespace lockstep::comm::kernels
