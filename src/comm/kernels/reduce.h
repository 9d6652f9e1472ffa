// Element-wise reduction kernels used by every transport.
//
// Contract: out[i] = in[0][i] (op) in[1][i] (op) ... (op) in[n-1][i], evaluated
// left to right, so the result depends only on the order of `in` — never on
// how a message is chunked or which kernel family runs. For kAverage the sum
// is then divided by `divisor`. f16/bf16 accumulate in f32 and round once.
// Integer sum/product wrap around (two's complement); integer average
// truncates toward zero. `out` may alias any input.
#pragma once

#include <cstddef>

#include "lockstep/comm/types.h"

namespace lockstep::comm::kernels {

enum class Family { kScalar, kAvx2 };

void reduce(DataType dtype, ReduceOp op, const void* const* in, int n, void* out, size_t count,
            int divisor);

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
