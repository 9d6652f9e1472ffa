#include "support/typed_data.h"

#include <cstring>

#include <fmt/format.h>

#include "lockstep/comm/half.h"

namespace lockstep::testing {
namespace {

double raw_value(ReduceOp op, size_t i, int rank, int salt) {
  uint64_t h = (i * 2654435761u) ^ (static_cast<uint64_t>(rank) * 40503u) ^ (salt * 97u);
  int v = static_cast<int>(h % 17) - 8;
  if (op == ReduceOp::kProduct) return v >= 0 ? 1.0 + v / 16.0 : 1.0 / (1.0 - v / 16.0);
  return v + (h % 5) * 0.25;
}

int64_t int_value(ReduceOp op, size_t i, int rank, int salt) {
  uint64_t h = (i * 2654435761u) ^ (static_cast<uint64_t>(rank) * 40503u) ^ (salt * 97u);
  if (op == ReduceOp::kProduct) return static_cast<int64_t>(h % 3) + 1;
  return static_cast<int64_t>(h % 200) - 100;
}

template <typename T>
void put(std::vector<uint8_t>& out, size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}

template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The value rank `rank` holds at element i, as the kernels' accumulator sees it.
double float_acc(DataType dtype, ReduceOp op, size_t i, int rank, int salt) {
  double v = raw_value(op, i, rank, salt);
  switch (dtype) {
    case DataType::kFloat16: return comm::f16_to_float(comm::float_to_f16(static_cast<float>(v)));
    case DataType::kBFloat16:
      return comm::bf16_to_float(comm::float_to_bf16(static_cast<float>(v)));
    case DataType::kFloat32: return static_cast<float>(v);
    default: return v;
  }
}

int64_t integer_acc(DataType dtype, ReduceOp op, size_t i, int rank, int salt) {
  int64_t v = int_value(op, i, rank, salt);
  switch (dtype) {
    case DataType::kInt8: return static_cast<int8_t>(v);
    case DataType::kUInt8: return static_cast<uint8_t>(v);
    case DataType::kInt32: return static_cast<int32_t>(v);
    case DataType::kInt16: return static_cast<int16_t>(v);
    default: return v;
  }
}

template <typename A>
A combine(ReduceOp op, A acc, A v) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return acc + v;
    case ReduceOp::kProduct: return acc * v;
    case ReduceOp::kMin: return v < acc ? v : acc;
    case ReduceOp::kMax: return v > acc ? v : acc;
  }
  return acc;
}

void store_float(DataType dtype, std::vector<uint8_t>& out, size_t i, double v) {
  switch (dtype) {
    case DataType::kFloat16:
      put<uint16_t>(out, i, comm::float_to_f16(static_cast<float>(v)));
      break;
    case DataType::kBFloat16:
      put<uint16_t>(out, i, comm::float_to_bf16(static_cast<float>(v)));
      break;
    case DataType::kFloat32: put<float>(out, i, static_cast<float>(v)); break;
    default: put<double>(out, i, v); break;
  }
}

void store_int(DataType dtype, std::vector<uint8_t>& out, size_t i, int64_t v) {
  switch (dtype) {
    case DataType::kInt8: put<int8_t>(out, i, static_cast<int8_t>(v)); break;
    case DataType::kUInt8: put<uint8_t>(out, i, static_cast<uint8_t>(v)); break;
    case DataType::kInt32: put<int32_t>(out, i, static_cast<int32_t>(v)); break;
    case DataType::kInt16: put<int16_t>(out, i, static_cast<int16_t>(v)); break;
    default: put<int64_t>(out, i, v); break;
  }
}

}  // namespace

std::vector<uint8_t> make_input(DataType dtype, ReduceOp op, size_t count, int rank, int salt) {
  std::vector<uint8_t> out(count * comm::dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    if (comm::is_floating(dtype))
      store_float(dtype, out, i, raw_value(op, i, rank, salt));
    else
      store_int(dtype, out, i, int_value(op, i, rank, salt));
  }
  return out;
}

std::vector<uint8_t> reference_reduce(DataType dtype, ReduceOp op, size_t begin, size_t count,
                                      size_t /*full_count*/, int size, int salt) {
  std::vector<uint8_t> out(count * comm::dtype_size(dtype));
  for (size_t k = 0; k < count; ++k) {
    size_t i = begin + k;
    if (dtype == DataType::kFloat64) {
      double acc = float_acc(dtype, op, i, 0, salt);
      for (int r = 1; r < size; ++r) acc = combine(op, acc, float_acc(dtype, op, i, r, salt));
      if (op == ReduceOp::kAverage) acc /= size;
      store_float(dtype, out, k, acc);
    } else if (comm::is_floating(dtype)) {
      float acc = static_cast<float>(float_acc(dtype, op, i, 0, salt));
      for (int r = 1; r < size; ++r)
        acc = combine(op, acc, static_cast<float>(float_acc(dtype, op, i, r, salt)));
      if (op == ReduceOp::kAverage) acc /= static_cast<float>(size);
      store_float(dtype, out, k, acc);
    } else {
      uint64_t acc = static_cast<uint64_t>(integer_acc(dtype, op, i, 0, salt));
      for (int r = 1; r < size; ++r) {
        int64_t v = integer_acc(dtype, op, i, r, salt);
        if (op == ReduceOp::kMin || op == ReduceOp::kMax)
          acc = static_cast<uint64_t>(combine(op, static_cast<int64_t>(acc), v));
        else
          acc = combine(op, acc, static_cast<uint64_t>(v));
      }
      int64_t result = static_cast<int64_t>(acc);
      if (op == ReduceOp::kAverage) result /= size;
      store_int(dtype, out, k, result);
    }
  }
  return out;
}

long first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                      size_t elem_size) {
  if (a.size() != b.size()) return 0;
  if (a.empty()) return -1;
  if (std::memcmp(a.data(), b.data(), a.size()) == 0) return -1;
  for (size_t i = 0; i < a.size(); i += elem_size)
    if (std::memcmp(a.data() + i, b.data() + i, elem_size) != 0)
      return static_cast<long>(i / elem_size);
  return -1;
}

std::string describe_element(DataType dtype, const uint8_t* p) {
  switch (dtype) {
    case DataType::kFloat16: return fmt::format("{}", comm::f16_to_float(get<uint16_t>(p)));
    case DataType::kBFloat16: return fmt::format("{}", comm::bf16_to_float(get<uint16_t>(p)));
    case DataType::kFloat32: return fmt::format("{}", get<float>(p));
    case DataType::kFloat64: return fmt::format("{}", get<double>(p));
    case DataType::kInt8: return fmt::format("{}", get<int8_t>(p));
    case DataType::kUInt8: return fmt::format("{}", get<uint8_t>(p));
    case DataType::kInt32: return fmt::format("{}", get<int32_t>(p));
    case DataType::kInt64: return fmt::format("{}", get<int64_t>(p));
    case DataType::kInt16: return fmt::format("{}", get<int16_t>(p));
  }
  return "?";
}

}  // namespace lockstep::testing
