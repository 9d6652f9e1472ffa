// Element types and reduction operators understood by every transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace lockstep::comm {

enum class DataType : uint8_t {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat32 = 2,
  kFloat64 = 3,
  kInt8 = 4,
  kUInt8 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kInt16 = 8,
};
inline constexpr int kNumDataTypes = 9;

// kAverage divides the sum by the number of contributors; for integer types
// the quotient is truncated toward zero. f16/bf16 accumulate in f32 and round
// once.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
};
inline constexpr int kNumReduceOps = 5;

// Bytes per element; throws InvalidArgument for a value outside the enum.
size_t dtype_size(DataType dtype);
std::string_view dtype_name(DataType dtype);                 // "f32", "bf16", ...
std::string_view reduce_op_name(ReduceOp op);                // "sum", "average", ...
std::optional<DataType> parse_dtype(std::string_view name);  // accepts "f32", "float32", "float"...
std::optional<ReduceOp> parse_reduce_op(std::string_view name);
bool is_valid(DataType dtype);
bool is_valid(ReduceOp op);
bool is_floating(DataType dtype);

// IEEE half / bfloat16 storage types; conversion helpers live in comm/half.h.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

}  // namespace lockstep::comm
