#include "engine/scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "lockstep/base/error.h"
#include "lockstep/comm/half.h"

namespace lockstep::engine::detail {
namespace {

template <typename T, typename F>
void for_each(const void* src, void* dst, size_t count, F f) {
  const T* s = static_cast<const T*>(src);
  T* d = static_cast<T*>(dst);
  for (size_t i = 0; i < count; ++i) d[i] = f(s[i]);
}

template <typename T>
void fill(void* dst, size_t count, T value) {
  T* d = static_cast<T*>(dst);
  for (size_t i = 0; i < count; ++i) d[i] = value;
}

template <typename T>
T neutral(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProduct: return T(1);
    case ReduceOp::kMin:
      return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::max();
    case ReduceOp::kMax:
      return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
    default: return T(0);
  }
}

void scale_16(const void* src, void* dst, size_t count, bool bf16, float factor) {
  for_each<uint16_t>(src, dst, count, [&](uint16_t x) {
    float f = (bf16 ? comm::bf16_to_float(x) : comm::f16_to_float(x)) * factor;
    return bf16 ? comm::float_to_bf16(f) : comm::float_to_f16(f);
  });
}

// x * factor in f64, truncated toward zero (what Horovod's integer scaling
// and torch's float-to-int cast give), saturating where the product leaves
// T's range instead of the undefined behaviour of an out-of-range cast.
template <typename T>
void scale_int(const void* src, void* dst, size_t count, double factor) {
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  for_each<T>(src, dst, count, [factor](T x) {
    double v = std::trunc(static_cast<double>(x) * factor);
    if (std::isnan(v)) return T(0);
    if (v <= lo) return std::numeric_limits<T>::lowest();
    if (v >= hi) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  });
}

template <typename T>
void divide(void* buf, size_t count, int divisor) {
  for_each<T>(buf, buf, count, [&](T x) { return static_cast<T>(x / divisor); });
}

template <typename T>
void widen(const void* src, size_t count, int64_t* wide) {
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < count; ++i) wide[i] = static_cast<int64_t>(s[i]);
}

template <typename T>
void narrow(const int64_t* wide, size_t count, void* dst) {
  T* d = static_cast<T*>(dst);
  constexpr auto lo = static_cast<int64_t>(std::numeric_limits<T>::lowest());
  constexpr auto hi = static_cast<int64_t>(std::numeric_limits<T>::max());
  for (size_t i = 0; i < count; ++i) d[i] = static_cast<T>(std::clamp(wide[i], lo, hi));
}

}  // namespace

void widen_to_i64(const void* src, size_t count, DataType dtype, int64_t* wide) {
  switch (dtype) {
    case DataType::kInt8: return widen<int8_t>(src, count, wide);
    case DataType::kUInt8: return widen<uint8_t>(src, count, wide);
    case DataType::kInt16: return widen<int16_t>(src, count, wide);
    case DataType::kInt32: return widen<int32_t>(src, count, wide);
    case DataType::kInt64: return widen<int64_t>(src, count, wide);
    default: throw InvalidArgument("widen_to_i64: integer dtypes only");
  }
}

void narrow_from_i64(const int64_t* wide, size_t count, DataType dtype, void* dst) {
  switch (dtype) {
    case DataType::kInt8: return narrow<int8_t>(wide, count, dst);
    case DataType::kUInt8: return narrow<uint8_t>(wide, count, dst);
    case DataType::kInt16: return narrow<int16_t>(wide, count, dst);
    case DataType::kInt32: return narrow<int32_t>(wide, count, dst);
    case DataType::kInt64: return narrow<int64_t>(wide, count, dst);
    default: throw InvalidArgument("narrow_from_i64: integer dtypes only");
  }
}

void copy_scaled(const void* src, void* dst, size_t count, DataType dtype, double factor) {
  if (factor == 1.0) {
    if (src != dst && count > 0) std::memcpy(dst, src, count * comm::dtype_size(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kFloat32: {
      float f = static_cast<float>(factor);
      for_each<float>(src, dst, count, [f](float x) { return x * f; });
      return;
    }
    case DataType::kFloat64:
      for_each<double>(src, dst, count, [factor](double x) { return x * factor; });
      return;
    case DataType::kFloat16: scale_16(src, dst, count, false, static_cast<float>(factor)); return;
    case DataType::kBFloat16: scale_16(src, dst, count, true, static_cast<float>(factor)); return;
    case DataType::kInt8: scale_int<int8_t>(src, dst, count, factor); return;
    case DataType::kUInt8: scale_int<uint8_t>(src, dst, count, factor); return;
    case DataType::kInt16: scale_int<int16_t>(src, dst, count, factor); return;
    case DataType::kInt32: scale_int<int32_t>(src, dst, count, factor); return;
    case DataType::kInt64: scale_int<int64_t>(src, dst, count, factor); return;
  }
}

void fill_neutral(void* dst, size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32: fill<float>(dst, count, neutral<float>(op)); return;
    case DataType::kFloat64: fill<double>(dst, count, neutral<double>(op)); return;
    case DataType::kInt8: fill<int8_t>(dst, count, neutral<int8_t>(op)); return;
    case DataType::kUInt8: fill<uint8_t>(dst, count, neutral<uint8_t>(op)); return;
    case DataType::kInt32: fill<int32_t>(dst, count, neutral<int32_t>(op)); return;
    case DataType::kInt64: fill<int64_t>(dst, count, neutral<int64_t>(op)); return;
    case DataType::kInt16: fill<int16_t>(dst, count, neutral<int16_t>(op)); return;
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      bool bf = dtype == DataType::kBFloat16;
      float v = neutral<float>(op);
      fill<uint16_t>(dst, count, bf ? comm::float_to_bf16(v) : comm::float_to_f16(v));
      return;
    }
  }
}

void finish_reduction(void* buf, size_t count, DataType dtype, ReduceOp op, double postscale,
                      int contributors) {
  bool average = op == ReduceOp::kAverage;
  if (!comm::is_floating(dtype) && postscale != 1.0) {
    // One truncation of sum * postscale / n, as Horovod folds the average
    // into the postscale factor.
    copy_scaled(buf, buf, count, dtype, average ? postscale / contributors : postscale);
    return;
  }
  if (!comm::is_floating(dtype)) {
    if (!average || contributors <= 1) return;
    switch (dtype) {
      case DataType::kInt8: divide<int8_t>(buf, count, contributors); return;
      case DataType::kUInt8: divide<uint8_t>(buf, count, contributors); return;
      case DataType::kInt32: divide<int32_t>(buf, count, contributors); return;
      case DataType::kInt64: divide<int64_t>(buf, count, contributors); return;
      case DataType::kInt16: divide<int16_t>(buf, count, contributors); return;
      default: return;
    }
  }
  double factor = average ? postscale / contributors : postscale;
  copy_scaled(buf, buf, count, dtype, factor);
}

ReduceOp wire_op(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

}  // namespace lockstep::engine::detail
