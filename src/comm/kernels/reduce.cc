#include "comm/kernels/reduce.h"

#include <cpuid.h>

#include <atomic>

#include "comm/kernels/reduce_impl.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"

namespace lockstep::comm::kernels {
namespace {

Family initial_family() {
  std::string choice = knob_string("LOCKSTEP_KERNELS");
  if (choice == "scalar") return Family::kScalar;
  if (choice == "avx2" && !cpu_has_avx2_f16c())
    throw InvalidArgument("LOCKSTEP_KERNELS=avx2 but this CPU lacks AVX2/F16C; use auto");
  if (choice != "auto" && choice != "avx2")
    throw InvalidArgument("LOCKSTEP_KERNELS='" + choice + "': use auto, avx2 or scalar");
  return cpu_has_avx2_f16c() ? Family::kAvx2 : Family::kScalar;
}

std::atomic<detail::ReduceFn>& active_fn() {
  static std::atomic<detail::ReduceFn> fn{
      initial_family() == Family::kAvx2 ? &detail::reduce_avx2 : &detail::reduce_scalar};
  return fn;
}

}  // namespace

// F16C through cpuid: clang's __builtin_cpu_supports does not know "f16c".
bool cpu_has_avx2_f16c() {
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
  return __builtin_cpu_supports("avx2") && f16c;
}

void detail::reduce_scalar(DataType dtype, ReduceOp op, const void* const* in, int n, void* out,
                           size_t count, int divisor) {
  impl::reduce_dispatch<impl::F16Scalar>(dtype, op, in, n, out, count, divisor);
}

void reduce(DataType dtype, ReduceOp op, const void* const* in, int n, void* out, size_t count,
            int divisor) {
  if (count == 0) return;
  active_fn().load(std::memory_order_relaxed)(dtype, op, in, n, out, count, divisor);
}

Family active_family() {
  return active_fn().load() == &detail::reduce_avx2 ? Family::kAvx2 : Family::kScalar;
}

void set_family(Family family) {
  if (family == Family::kAvx2 && !cpu_has_avx2_f16c())
    throw InvalidArgument("AVX2 kernels requested on a CPU without AVX2/F16C");
  active_fn().store(family == Family::kAvx2 ? &detail::reduce_avx2 : &detail::reduce_scalar);
}

}  // namespace lockstep::comm::kernels
