// Element-wise reduction kernels used by every transport: reduce() and its
// contract are public (lockstep/comm/kernels.h); the kernel families here.
#pragma once

#include <cstddef>

#include "lockstep/comm/kernels.h"
#include "lockstep/comm/types.h"

namespace lockstep::comm::kernels {

enum class Family { kScalar, kAvx2 };

// Whether this CPU runs the AVX2 family (AVX2 and F16C).
bool cpu_has_avx2_f16c();

// The family chosen at start-up: AVX2+F16C when the CPU has it (and
// LOCKSTEP_KERNELS allows), else scalar.
Family active_family();
// Forces a family (tests compare families bitwise); kAvx2 on a CPU without it
// throws InvalidArgument.
void set_family(Family family);

namespace detail {
using ReduceFn = void (*)(DataType, ReduceOp, const void* const*, int, void*, size_t, int);
void reduce_scalar(DataType, ReduceOp, const void* const*, int, void*, size_t, int);
void reduce_avx2(DataType, ReduceOp, const void* const*, int, void*, size_t, int);
}  // namespace detail

}  // namespace lockstep::comm::kernels
