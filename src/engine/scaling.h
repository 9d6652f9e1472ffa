// Element-wise helpers for allreduce: pre/post scaling and the neutral
// values joined ranks contribute. Each element is transformed the same way
// whether it sits in a fused buffer or not, which is what keeps fused and
// unfused results bitwise identical (docs/engine.md, deterministic mode).
#pragma once

#include <cstddef>

#include "lockstep/engine/types.h"

namespace lockstep::engine::detail {

// dst[i] = src[i] * factor (f16/bf16/f32 multiply in f32, f64 in f64).
// Integers multiply in f64 and truncate toward zero, saturating at the
// type's range. src may equal dst.
void copy_scaled(const void* src, void* dst, size_t count, DataType dtype, double factor);

// The identity of `op`: 0 for sum/average, 1 for product, +inf/max for min,
// -inf/lowest for max.
void fill_neutral(void* dst, size_t count, DataType dtype, ReduceOp op);

// After a sum: average over `contributors` and apply `postscale`. Integers
// without a postscale divide (truncating toward zero); otherwise the sum is
// multiplied by postscale/contributors (integers in f64, then truncated).
void finish_reduction(void* buf, size_t count, DataType dtype, ReduceOp op, double postscale,
                      int contributors);

// The op handed to the Communicator (average becomes sum: the engine divides
// by the number of contributors, which join makes differ from size()).
ReduceOp wire_op(ReduceOp op);

}  // namespace lockstep::engine::detail
