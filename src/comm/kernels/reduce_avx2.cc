// AVX2 + F16C build of the shared kernel bodies (compiled with -mavx2 -mf16c).
#include <immintrin.h>

#include "comm/kernels/reduce_impl.h"

namespace lockstep::comm::kernels {
namespace {

struct F16Hardware : impl::BF16 {
  static Acc load(Store v) { return _cvtsh_ss(v); }
  static Store store(Acc v) { return _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT); }
};

}  // namespace

void detail::reduce_avx2(DataType dtype, ReduceOp op, const void* const* in, int n, void* out,
                         size_t count, int divisor) {
  impl::reduce_dispatch<F16Hardware>(dtype, op, in, n, out, count, divisor);
}

}  // namespace lockstep::comm::kernels
