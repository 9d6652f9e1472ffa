// The two-level allreduce: two_step within each NUMA node, the shares'
// rank-order sums chained from node to node; docs/shm.md has its cost.
#include <algorithm>
#include <cstring>

#include "comm/kernels/copy.h"
#include "comm/kernels/reduce.h"
#include "comm/transport/shm/shm_comm.h"
#include "lockstep/base/check.h"
#include "lockstep/comm/half.h"

namespace lockstep::comm::shm {
namespace {

const std::byte* in_bytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* out_bytes(void* p) { return static_cast<std::byte*>(p); }

// The type reduce() accumulates `dtype` in (lockstep/comm/kernels.h).
DataType accumulator(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
    case DataType::kBFloat16: return DataType::kFloat32;
    case DataType::kFloat32:
    case DataType::kFloat64: return dtype;
    default: return DataType::kInt64;
  }
}

template <typename T>
void widen_int(const void* in, void* out, size_t count) {
  const T* src = static_cast<const T*>(in);
  int64_t* dst = static_cast<int64_t*>(out);
  for (size_t i = 0; i < count; ++i) dst[i] = static_cast<int64_t>(src[i]);
}

template <typename T>
void narrow_int(const void* in, void* out, size_t count) {
  const int64_t* src = static_cast<const int64_t*>(in);
  T* dst = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) dst[i] = static_cast<T>(src[i]);
}

// Exact: every value of `dtype` is one of its accumulator's.
void widen(DataType dtype, const void* in, void* out, size_t count) {
  const uint16_t* h = static_cast<const uint16_t*>(in);
  float* f = static_cast<float*>(out);
  switch (dtype) {
    case DataType::kFloat16:
      for (size_t i = 0; i < count; ++i) f[i] = f16_to_float(h[i]);
      return;
    case DataType::kBFloat16:
      for (size_t i = 0; i < count; ++i) f[i] = bf16_to_float(h[i]);
      return;
    case DataType::kInt8: return widen_int<int8_t>(in, out, count);
    case DataType::kUInt8: return widen_int<uint8_t>(in, out, count);
    case DataType::kInt32: return widen_int<int32_t>(in, out, count);
    case DataType::kInt16: return widen_int<int16_t>(in, out, count);
    default: return copy_bytes(out, in, count * dtype_size(dtype));
  }
}

// The kernels' final store: rounding (f16, bf16) or wrap-around (integers).
void narrow(DataType dtype, const void* in, void* out, size_t count) {
  const float* f = static_cast<const float*>(in);
  uint16_t* h = static_cast<uint16_t*>(out);
  switch (dtype) {
    case DataType::kFloat16:
      for (size_t i = 0; i < count; ++i) h[i] = float_to_f16(f[i]);
      return;
    case DataType::kBFloat16:
      for (size_t i = 0; i < count; ++i) h[i] = float_to_bf16(f[i]);
      return;
    case DataType::kInt8: return narrow_int<int8_t>(in, out, count);
    case DataType::kUInt8: return narrow_int<uint8_t>(in, out, count);
    case DataType::kInt32: return narrow_int<int32_t>(in, out, count);
    case DataType::kInt16: return narrow_int<int16_t>(in, out, count);
    default: return copy_bytes(out, in, count * dtype_size(dtype));
  }
}

}  // namespace

// Note [Two-level allreduce]
// On a host with several NUMA nodes, flat two_step has every rank read its
// share from every peer and every other share's result from its owner:
// (n-L)/n of those reads, about 2B(n-L)/n per rank, cross the link between
// nodes. Every reduction in lockstep sums in rank order 0..n-1 (docs/shm.md),
// and when node g holds the contiguous ranks gL..gL+L-1 that sum is a chain
// over nodes: node 0's partial sum (prefix), continued by node 1's ranks in
// order, and so on; the last node's is the result. So per chunk, split into
// L shares, local rank l of each node owns share l, and between steps:
//   stage      every rank stages the chunk but its own share
//   chain      node 0's owners reduce their node's contributions; after
//              each step the next node's owners continue from the previous
//              node's prefix (read across the link once)        G intervals
//   final      the other nodes' owners copy the last node's result (read
//              across the link once) for their node's peers
//   copy out   every rank copies the other shares from its node's owners
// Final runs beside the next chunk's staging, copy out beside node 0's
// reduction of the next chunk: G + 1 steps per chunk, one more at the end.
// Prefixes are kept in reduce()'s accumulator type (f32 for f16/bf16, int64
// for integers, so an integer average divides the full sum) and only the
// last node applies an average's division and rounds, so results are
// bitwise those of the flat algorithms. One fill per chunk: chunk c's
// buffer is last read by copy out, after chunk c+1's first step, and
// restaged for chunk c+2 G steps later (its result area later still); the
// last chunk's leaves the fill parity as the legacy two_step does. Reduce
// (to one root) keeps two_step.
void ShmBackend::allreduce_two_level(const void* send, void* recv, size_t count, DataType dtype,
                                     ReduceOp op, size_t chunk_bytes) {
  TwoLevelCall k{send, recv, dtype, op, dtype_size(dtype), accumulator(dtype)};
  k.acc_size = dtype_size(k.acc);
  const size_t S = segment_->slot_bytes();
  // The staged chunk takes at most half a slot, the share's prefix (up to
  // 8x wider) the rest.
  k.count = count;
  k.chunk = std::max<size_t>(1, std::min(chunk_bytes / k.es, S / 2 / std::max(k.es, k.acc_size)));
  k.result = ceil_div(k.chunk * k.es, 64) * 64;
  k.deliver = count * k.es >= tuning_.stream_bytes ? &kernels::copy_streaming : &copy_bytes;
  const size_t chunks = std::max<size_t>(1, ceil_div(count, k.chunk));
  const int g = rank_ / local_;
  int previous = 0;  // the buffer of chunk c - 1
  for (size_t c = 0; c < chunks; ++c) {
    const int b = next_buffer();
    two_level_stage(k, c, b);
    if (c > 0) two_level_final(k, c - 1, previous);
    if (c == 0)
      first_step();
    else
      step();
    if (c > 0) two_level_copy_out(k, c - 1, previous);
    for (int node = 0; node < groups_; ++node) {  // the chain, one node per step
      if (node == g) reduce_share(k, c, b);
      step();
    }
    previous = b;
  }
  two_level_final(k, chunks - 1, previous);
  step();
  two_level_copy_out(k, chunks - 1, previous);
}

TwoLevelShare ShmBackend::two_level_share(const TwoLevelCall& k, size_t c, int l) const {
  const size_t off = std::min(k.count, c * k.chunk), m = std::min(k.chunk, k.count - off);
  const Partition part(m, local_, k.es);
  LOCKSTEP_DCHECK(k.result + part.per * k.acc_size <= segment_->slot_bytes(),
                  "two_level: share of {} elements past the slot", part.per);
  return {off, m, part.begin(l), part.end(l) - part.begin(l)};
}

void ShmBackend::two_level_stage(const TwoLevelCall& k, size_t c, int b) {
  const TwoLevelShare s = two_level_share(k, c, rank_ % local_);
  const std::byte* in = in_bytes(k.send) + s.off * k.es;
  std::byte* mine = slot(rank_, b);
  copy_bytes(mine, in, s.lo * k.es);
  copy_bytes(mine + (s.lo + s.n) * k.es, in + (s.lo + s.n) * k.es, (s.m - s.lo - s.n) * k.es);
  seg_written_ += (s.m - s.n) * k.es;
}

// Off the last node: share l's result, from the last node's owner of it.
void ShmBackend::two_level_final(const TwoLevelCall& k, size_t c, int b) {
  const int l = rank_ % local_;
  const TwoLevelShare s = two_level_share(k, c, l);
  if (rank_ / local_ == groups_ - 1 || s.n == 0) return;
  std::byte* mine = slot(rank_, b) + k.result;
  copy_bytes(mine, slot((groups_ - 1) * local_ + l, b) + k.result, s.n * k.es);
  k.deliver(out_bytes(k.recv) + (s.off + s.lo) * k.es, mine, s.n * k.es);
  seg_read_ += s.n * k.es;
  seg_cross_ += s.n * k.es;
  seg_written_ += s.n * k.es;
}

void ShmBackend::two_level_copy_out(const TwoLevelCall& k, size_t c, int b) {
  const int l = rank_ % local_, first = rank_ - l;
  for (int i = 1; i < local_; ++i) {  // from the next owner on (staggered reads)
    const int owner = (l + i) % local_;
    const TwoLevelShare s = two_level_share(k, c, owner);
    k.deliver(out_bytes(k.recv) + (s.off + s.lo) * k.es, slot(first + owner, b) + k.result,
              s.n * k.es);
    seg_read_ += s.n * k.es;
  }
}

// This rank's share of chunk c: its node's contributions in rank order
// after the previous node's prefix, into this rank's result area: a prefix
// in the accumulator type, or on the last node the result, which it also
// delivers.
void ShmBackend::reduce_share(const TwoLevelCall& k, size_t c, int b) {
  const int L = local_, g = rank_ / L;
  const TwoLevelShare s = two_level_share(k, c, rank_ % L);
  const size_t at = s.off + s.lo, lo = s.lo, n = s.n;
  if (n == 0) return;
  const bool last = g == groups_ - 1, same = k.acc == k.dtype;
  const ReduceOp op = last || k.op != ReduceOp::kAverage ? k.op : ReduceOp::kSum;
  std::vector<const void*> in;
  if (g > 0) in.push_back(slot(rank_ - L, b) + k.result);  // the previous node's prefix
  for (int r = g * L; r < (g + 1) * L; ++r)
    in.push_back(r == rank_ ? in_bytes(k.send) + at * k.es : slot(r, b) + lo * k.es);
  std::byte* out = slot(rank_, b) + k.result;
  if (same) {
    kernels::reduce(k.dtype, op, in.data(), int(in.size()), out, n, size_);
  } else {  // widen the contributions; reduce into scratch; round once if last
    scratch_.resize((L + 1) * n * k.acc_size);
    for (size_t i = g > 0 ? 1 : 0; i < in.size(); ++i) {
      std::byte* wide = scratch_.data() + i * n * k.acc_size;
      widen(k.dtype, in[i], wide, n);
      in[i] = wide;
    }
    void* acc_out = last ? static_cast<void*>(scratch_.data()) : out;
    kernels::reduce(k.acc, op, in.data(), int(in.size()), acc_out, n, size_);
    if (last) narrow(k.dtype, acc_out, out, n);
  }
  seg_read_ += (L - 1) * n * k.es + (g > 0 ? n * k.acc_size : 0);
  seg_cross_ += g > 0 ? n * k.acc_size : 0;
  seg_written_ += n * (last ? k.es : k.acc_size);
  if (last) k.deliver(out_bytes(k.recv) + at * k.es, out, n * k.es);
}

}  // namespace lockstep::comm::shm
