// Element-wise helpers for allreduce: pre/post scaling and the neutral
// values joined ranks contribute. Each element is transformed the same way
// whether it sits in a fused buffer or not, which is what keeps fused and
// unfused results bitwise identical (docs/engine.md, deterministic mode).
#pragma once

#include <cstddef>
#include <cstdint>

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

// An integer average while ranks have joined: the sum travels as int64, so
// a narrow type (i8, u8, i16, i32) does not wrap around before the division
// by the contributors, which is how the transports' own average (int64
// accumulator, truncating division) treats it when nobody joined.
// `wide` gets count elements of `src` widened; narrow_from_i64 stores them
// back, saturating at the type's range.
void widen_to_i64(const void* src, size_t count, DataType dtype, int64_t* wide);
void narrow_from_i64(const int64_t* wide, size_t count, DataType dtype, void* dst);

// The op handed to the Communicator (average becomes sum: the engine divides
// by the number of contributors, which join makes differ from size()).
ReduceOp wire_op(ReduceOp op);

}  // namespace lockstep::engine::detail
