// Kernel bodies shared by the scalar and AVX2 translation units; each unit
// compiles them with its own target flags (reduce_avx2.cc with -mavx2 -mf16c),
// which is how the loops below get vectorised without intrinsics. Included
// only from those two files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "comm/kernels/reduce.h"
#include "lockstep/comm/half.h"

namespace lockstep::comm::kernels::impl {

// "No loop-carried dependence" for GCC's vectoriser, which otherwise
// versions the element-wise loops below or leaves them scalar. Clang
// vectorises them unasked (and warns where a forced hint fails: f16).
#if defined(__clang__)
#define LOCKSTEP_IVDEP
#else
#define LOCKSTEP_IVDEP _Pragma("GCC ivdep")
#endif

// Elements processed per block: the accumulator stays in L1 while each input
// streams through once.
inline constexpr size_t kBlock = 512;

template <typename T>
struct Plain {  // f32, f64: accumulate in the type itself
  using Store = T;
  using Acc = T;
  static Acc load(Store v) { return v; }
  static Store store(Acc v) { return v; }
  static Acc add(Acc a, Acc b) { return a + b; }
  static Acc mul(Acc a, Acc b) { return a * b; }
  static Acc div(Acc a, int d) { return a / static_cast<Acc>(d); }
};

template <typename T>
struct Integer {  // wrap-around sum/product without signed-overflow UB
  using Store = T;
  using Acc = int64_t;
  static Acc load(Store v) { return static_cast<Acc>(v); }
  static Store store(Acc v) { return static_cast<Store>(v); }
  static Acc add(Acc a, Acc b) {
    return static_cast<Acc>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  }
  static Acc mul(Acc a, Acc b) {
    return static_cast<Acc>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  }
  static Acc div(Acc a, int d) { return a / d; }
};

struct BF16 {
  using Store = uint16_t;
  using Acc = float;
  static Acc load(Store v) { return bf16_to_float(v); }
  static Store store(Acc v) { return float_to_bf16(v); }
  static Acc add(Acc a, Acc b) { return a + b; }
  static Acc mul(Acc a, Acc b) { return a * b; }
  static Acc div(Acc a, int d) { return a / static_cast<Acc>(d); }
};

struct F16Scalar : BF16 {
  static Acc load(Store v) { return f16_to_float(v); }
  static Store store(Acc v) { return float_to_f16(v); }
};

enum class Kind { kSum, kMin, kMax, kProduct };

template <typename Tr, Kind K>
inline typename Tr::Acc apply(typename Tr::Acc acc, typename Tr::Acc v) {
  if constexpr (K == Kind::kSum) return Tr::add(acc, v);
  if constexpr (K == Kind::kProduct) return Tr::mul(acc, v);
  if constexpr (K == Kind::kMin) return v < acc ? v : acc;
  if constexpr (K == Kind::kMax) return v > acc ? v : acc;
}

// Element-wise loops: each out[i] is written after every input's element i
// was read, so `out` may be any input, and LOCKSTEP_IVDEP is true.
template <typename Tr, Kind K>
inline void combine(typename Tr::Acc* acc, const typename Tr::Store* in, size_t m) {
  LOCKSTEP_IVDEP
  for (size_t i = 0; i < m; ++i) acc[i] = apply<Tr, K>(acc[i], Tr::load(in[i]));
}

// Note [Two-input reduction]
// Two inputs (every two-rank allreduce, and each share of two_step) take
// one pass: out[i] = a[i] op b[i], the same operations in the same order as
// the blocked loop below, so results are bitwise those of any n or chunk.
// The blocked loop reads each input once more per block through an L1
// accumulator; for two inputs that was a third of the kernel's time.
// A traits class may vectorise the leading elements itself (F16Hardware,
// whose scalar conversions the compiler cannot vectorise): `Tr::two<K>`
// returns how many it did, with the same per-element operations.
template <typename Tr, Kind K>
void reduce_two(const typename Tr::Store* a, const typename Tr::Store* b, typename Tr::Store* o,
                size_t count, bool average, int divisor) {
  size_t done = 0;
  if constexpr (requires { Tr::template two<K>(a, b, o, count, average, divisor); })
    done = Tr::template two<K>(a, b, o, count, average, divisor);
  if (average) {
    LOCKSTEP_IVDEP
    for (size_t i = done; i < count; ++i)
      o[i] = Tr::store(Tr::div(apply<Tr, K>(Tr::load(a[i]), Tr::load(b[i])), divisor));
    return;
  }
  LOCKSTEP_IVDEP
  for (size_t i = done; i < count; ++i)
    o[i] = Tr::store(apply<Tr, K>(Tr::load(a[i]), Tr::load(b[i])));
}

template <typename Tr, Kind K>
void reduce_blocks(const void* const* in, int n, void* out, size_t count, bool average,
                   int divisor) {
  using S = typename Tr::Store;
  using A = typename Tr::Acc;
  S* o = static_cast<S*>(out);
  if (n == 2)
    return reduce_two<Tr, K>(static_cast<const S*>(in[0]), static_cast<const S*>(in[1]), o, count,
                             average, divisor);
  alignas(64) A acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t m = std::min(kBlock, count - base);
    const S* first = static_cast<const S*>(in[0]) + base;
    LOCKSTEP_IVDEP
    for (size_t i = 0; i < m; ++i) acc[i] = Tr::load(first[i]);
    for (int k = 1; k < n; ++k) combine<Tr, K>(acc, static_cast<const S*>(in[k]) + base, m);
    if (average)
      for (size_t i = 0; i < m; ++i) acc[i] = Tr::div(acc[i], divisor);
    LOCKSTEP_IVDEP
    for (size_t i = 0; i < m; ++i) o[base + i] = Tr::store(acc[i]);
  }
}

template <typename Tr>
void reduce_typed(ReduceOp op, const void* const* in, int n, void* out, size_t count, int divisor) {
  switch (op) {
    case ReduceOp::kSum: return reduce_blocks<Tr, Kind::kSum>(in, n, out, count, false, 1);
    case ReduceOp::kAverage: return reduce_blocks<Tr, Kind::kSum>(in, n, out, count, true, divisor);
    case ReduceOp::kMin: return reduce_blocks<Tr, Kind::kMin>(in, n, out, count, false, 1);
    case ReduceOp::kMax: return reduce_blocks<Tr, Kind::kMax>(in, n, out, count, false, 1);
    case ReduceOp::kProduct: return reduce_blocks<Tr, Kind::kProduct>(in, n, out, count, false, 1);
  }
}

// F16 is a parameter because the AVX2 unit substitutes a hardware-converting
// traits class.
template <typename F16>
void reduce_dispatch(DataType dtype, ReduceOp op, const void* const* in, int n, void* out,
                     size_t count, int divisor) {
  switch (dtype) {
    case DataType::kFloat16: return reduce_typed<F16>(op, in, n, out, count, divisor);
    case DataType::kBFloat16: return reduce_typed<BF16>(op, in, n, out, count, divisor);
    case DataType::kFloat32: return reduce_typed<Plain<float>>(op, in, n, out, count, divisor);
    case DataType::kFloat64: return reduce_typed<Plain<double>>(op, in, n, out, count, divisor);
    case DataType::kInt8: return reduce_typed<Integer<int8_t>>(op, in, n, out, count, divisor);
    case DataType::kUInt8: return reduce_typed<Integer<uint8_t>>(op, in, n, out, count, divisor);
    case DataType::kInt32: return reduce_typed<Integer<int32_t>>(op, in, n, out, count, divisor);
    case DataType::kInt64: return reduce_typed<Integer<int64_t>>(op, in, n, out, count, divisor);
    case DataType::kInt16: return reduce_typed<Integer<int16_t>>(op, in, n, out, count, divisor);
  }
}

}  // namespace lockstep::comm::kernels::impl
