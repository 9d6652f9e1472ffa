#include "lockstep/comm/types.h"

#include <array>
#include <string>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::comm {
namespace {

struct DTypeInfo {
  size_t size;
  std::string_view name;
  std::array<std::string_view, 3> aliases;
};

constexpr std::array<DTypeInfo, kNumDataTypes> kDTypes = {{
    {2, "f16", {"float16", "half", "fp16"}},
    {2, "bf16", {"bfloat16", "bf16", "bfloat"}},
    {4, "f32", {"float32", "float", "fp32"}},
    {8, "f64", {"float64", "double", "fp64"}},
    {1, "i8", {"int8", "char", "s8"}},
    {1, "u8", {"uint8", "byte", "uchar"}},
    {4, "i32", {"int32", "int", "s32"}},
    {8, "i64", {"int64", "long", "s64"}},
    {2, "i16", {"int16", "short", "s16"}},
}};

constexpr std::array<std::string_view, kNumReduceOps> kOps = {"sum", "average", "min", "max",
                                                              "product"};

}  // namespace

bool is_valid(DataType dtype) { return static_cast<unsigned>(dtype) < kNumDataTypes; }
bool is_valid(ReduceOp op) { return static_cast<unsigned>(op) < kNumReduceOps; }

bool is_floating(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

size_t dtype_size(DataType dtype) {
  if (!is_valid(dtype))
    throw InvalidArgument(fmt::format("unknown dtype value {}", static_cast<int>(dtype)));
  return kDTypes[static_cast<size_t>(dtype)].size;
}

std::string_view dtype_name(DataType dtype) {
  return is_valid(dtype) ? kDTypes[static_cast<size_t>(dtype)].name : "invalid-dtype";
}

std::string_view reduce_op_name(ReduceOp op) {
  return is_valid(op) ? kOps[static_cast<size_t>(op)] : "invalid-op";
}

std::optional<DataType> parse_dtype(std::string_view name) {
  for (size_t i = 0; i < kDTypes.size(); ++i) {
    if (kDTypes[i].name == name) return static_cast<DataType>(i);
    for (auto alias : kDTypes[i].aliases)
      if (alias == name) return static_cast<DataType>(i);
  }
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (size_t i = 0; i < kOps.size(); ++i)
    if (kOps[i] == name) return static_cast<ReduceOp>(i);
  if (name == "avg" || name == "mean") return ReduceOp::kAverage;
  if (name == "prod") return ReduceOp::kProduct;
  return std::nullopt;
}

}  // namespace lockstep::comm
