// The element-wise reduction kernel every transport runs, public so that
// tools can time it (`lockstep bench fit` fits the planner's per-byte
// reduction cost from it).
//
// Contract: out[i] = in[0][i] (op) in[1][i] (op) ... (op) in[n-1][i], evaluated
// left to right, so the result depends only on the order of `in` — never on
// how a message is chunked or which kernel family runs. For kAverage the sum
// is then divided by `divisor`. f16/bf16 accumulate in f32 and round once.
// Integer sum/product wrap around (two's complement); integer average
// truncates toward zero. `out` may alias any input. Thread-safe (no state
// beyond the kernel family chosen at start-up).
#pragma once

#include <cstddef>

#include "lockstep/comm/types.h"

namespace lockstep::comm::kernels {

void reduce(DataType dtype, ReduceOp op, const void* const* in, int n, void* out, size_t count,
            int divisor);

}  // namespace lockstep::comm::kernels
