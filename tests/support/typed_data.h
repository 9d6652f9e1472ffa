// Deterministic per-rank test inputs and an independent scalar reference for
// reductions: every element is reduced in rank order, in the accumulator
// type the kernels document (f32 for 16-bit floats, int64 with wrap-around
// for integers), without chunking or vector code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/comm/types.h"

namespace lockstep::testing {

using comm::DataType;
using comm::ReduceOp;

// Bytes of `count` elements that rank `rank` contributes to case `salt`.
// Values stay small (and near 1 for products) so float results are exact
// enough to compare bitwise against the reference.
std::vector<uint8_t> make_input(DataType dtype, ReduceOp op, size_t count, int rank, int salt);

// The reduction of make_input(..., r, salt) over r = 0..size-1 for elements
// [begin, begin + count) of the full vector.
std::vector<uint8_t> reference_reduce(DataType dtype, ReduceOp op, size_t begin, size_t count,
                                      size_t full_count, int size, int salt);

// Index of the first differing element, or -1.
long first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                      size_t elem_size);
std::string describe_element(DataType dtype, const uint8_t* p);

}  // namespace lockstep::testing
