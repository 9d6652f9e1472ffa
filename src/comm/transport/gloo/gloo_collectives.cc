// The collectives of the Gloo backend, each mapped onto Gloo's options-style
// API (never the older algorithm classes: see gloo_backend.h), with
// lockstep's kernels as the reduction function (16-bit floats, wrap-around
// integers, averages).
#include <cstring>
#include <numeric>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>

#include <fmt/format.h>

#include "comm/kernels/reduce.h"
#include "comm/transport/gloo/gloo_comm.h"

namespace lockstep::comm::gloo_transport {
namespace {

const std::byte* bytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }

// Gloo's typed setters only use sizeof(T): pick an unsigned type of the
// element's width and call f with a null pointer of it.
template <typename F>
void with_width(DataType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1: return f(static_cast<uint8_t*>(nullptr));
    case 2: return f(static_cast<uint16_t*>(nullptr));
    case 4: return f(static_cast<uint32_t*>(nullptr));
    default: return f(static_cast<uint64_t*>(nullptr));
  }
}

// Gloo combines two buffers at a time; kAverage sums and divides at the end.
::gloo::AllreduceOptions::Func reduce_fn(DataType dtype, ReduceOp op) {
  ReduceOp combine = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  return [dtype, combine](void* out, const void* a, const void* b, size_t n) {
    const void* in[2] = {a, b};
    kernels::reduce(dtype, combine, in, 2, out, n, 1);
  };
}

void divide(void* data, size_t count, DataType dtype, int divisor) {
  const void* in[1] = {data};
  kernels::reduce(dtype, ReduceOp::kAverage, in, 1, data, count, divisor);
}

// i8/u8/i16/i32 averages sum in int64 (as the kernels accumulate) so the narrow
// sum cannot wrap before the division.
bool wide_average(DataType dtype, ReduceOp op) {
  return op == ReduceOp::kAverage && (dtype == DataType::kInt8 || dtype == DataType::kUInt8 ||
                                      dtype == DataType::kInt16 || dtype == DataType::kInt32);
}

int64_t load_int(const void* p, size_t i, DataType dtype) {
  switch (dtype) {
    case DataType::kInt8: return static_cast<const int8_t*>(p)[i];
    case DataType::kUInt8: return static_cast<const uint8_t*>(p)[i];
    case DataType::kInt16: return static_cast<const int16_t*>(p)[i];
    default: return static_cast<const int32_t*>(p)[i];
  }
}

void store_int(void* p, size_t i, DataType dtype, int64_t v) {
  switch (dtype) {
    case DataType::kInt8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    default: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
  }
}

// Gloo rejects null buffers even when empty.
void* nonnull(void* p) {
  static std::byte dummy[8];
  return p ? p : dummy;
}

}  // namespace

void GlooBackend::allgather_raw(const void* send, void* recv, size_t bytes_each) {
  guarded("verify", [&] {
    ::gloo::AllgatherOptions opts(context_);
    opts.setInput(static_cast<uint8_t*>(const_cast<void*>(send)), bytes_each);
    opts.setOutput(static_cast<uint8_t*>(recv), bytes_each * size_);
    opts.setTag(tag_);
    opts.setTimeout(timeout_);
    ::gloo::allgather(opts);
  });
}

void GlooBackend::allreduce_impl(const void* send, void* recv, size_t count, DataType dtype,
                                 ReduceOp op) {
  if (count == 0) return;
  if (wide_average(dtype, op)) {
    std::vector<int64_t> wide(count);
    for (size_t i = 0; i < count; ++i) wide[i] = load_int(send, i, dtype);
    allreduce_impl(wide.data(), wide.data(), count, DataType::kInt64, ReduceOp::kSum);
    for (size_t i = 0; i < count; ++i) store_int(recv, i, dtype, wide[i] / size_);
    return;
  }
  if (size_ == 1) {
    if (send != recv) std::memcpy(recv, send, count * dtype_size(dtype));
  } else {
    guarded("allreduce", [&] {
      ::gloo::AllreduceOptions opts(context_);
      with_width(dtype, [&](auto* t) {
        using T = std::remove_pointer_t<decltype(t)>;
        if (send != recv) opts.setInput(static_cast<T*>(const_cast<void*>(send)), count);
        opts.setOutput(static_cast<T*>(recv), count);
      });
      opts.setReduceFunction(reduce_fn(dtype, op));
      opts.setTag(tag_);
      opts.setTimeout(timeout_);
      ::gloo::allreduce(opts);
    });
  }
  if (op == ReduceOp::kAverage) divide(recv, count, dtype, size_);
}

void GlooBackend::allreduce(const void* send, void* recv, size_t count, DataType dtype,
                            ReduceOp op) {
  begin(kit::make_desc(kit::OpKind::kAllreduce, dtype, -1, count, op));
  allreduce_impl(send, recv, count, dtype, op);
}

void GlooBackend::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                         int root) {
  begin(kit::make_desc(kit::OpKind::kReduce, dtype, root, count, op));
  if (count == 0) return;
  if (wide_average(dtype, op) || size_ == 1) {
    // Rare enough to reuse the allreduce path rather than widen twice.
    std::vector<std::byte> scratch(count * dtype_size(dtype));
    allreduce_impl(send, scratch.data(), count, dtype, op);
    if (rank_ == root) std::memcpy(recv, scratch.data(), scratch.size());
    return;
  }
  // Gloo's reduce needs an output buffer on every rank.
  std::vector<std::byte> scratch;
  void* out = recv;
  if (rank_ != root) {
    scratch.resize(count * dtype_size(dtype));
    out = scratch.data();
  }
  guarded("reduce", [&] {
    ::gloo::ReduceOptions opts(context_);
    with_width(dtype, [&](auto* t) {
      using T = std::remove_pointer_t<decltype(t)>;
      if (send != out) opts.setInput(static_cast<T*>(const_cast<void*>(send)), count);
      opts.setOutput(static_cast<T*>(out), count);
    });
    opts.setRoot(root);
    opts.setReduceFunction(reduce_fn(dtype, op));
    opts.setTag(tag_);
    opts.setTimeout(timeout_);
    ::gloo::reduce(opts);
  });
  if (op == ReduceOp::kAverage && rank_ == root) divide(recv, count, dtype, size_);
}

void GlooBackend::broadcast(void* buffer, size_t count, DataType dtype, int root) {
  begin(kit::make_desc(kit::OpKind::kBroadcast, dtype, root, count));
  if (count == 0 || size_ == 1) return;
  guarded("broadcast", [&] {
    ::gloo::BroadcastOptions opts(context_);
    with_width(dtype, [&](auto* t) {
      using T = std::remove_pointer_t<decltype(t)>;
      opts.setOutput(static_cast<T*>(buffer), count);
    });
    opts.setRoot(root);
    opts.setTag(tag_);
    opts.setTimeout(timeout_);
    ::gloo::broadcast(opts);
  });
}

void GlooBackend::allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                             DataType dtype) {
  begin(kit::make_desc(kit::OpKind::kAllgatherv, dtype, -1, kit::hash_counts(counts)));
  size_t es = dtype_size(dtype);
  size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  if (total == 0) return;
  size_t offset = std::accumulate(counts.begin(), counts.begin() + rank_, size_t{0});
  // Gloo copies the input into its slot; stage it if it lives inside recv.
  std::vector<std::byte> staged;
  const void* input = send;
  size_t mine = counts[rank_] * es;
  if (mine && bytes(send) < bytes(recv) + total * es && bytes(recv) < bytes(send) + mine) {
    staged.assign(bytes(send), bytes(send) + mine);
    input = staged.data();
  }
  if (size_ == 1) {
    if (mine && input != recv) std::memcpy(bytes(recv) + offset * es, input, mine);
    return;
  }
  guarded("allgather", [&] {
    ::gloo::AllgathervOptions opts(context_);
    with_width(dtype, [&](auto* t) {
      using T = std::remove_pointer_t<decltype(t)>;
      opts.setInput(static_cast<T*>(nonnull(const_cast<void*>(input))), counts[rank_]);
      opts.setOutput(static_cast<T*>(recv), std::vector<size_t>(counts.begin(), counts.end()));
    });
    opts.setTag(tag_);
    opts.setTimeout(timeout_);
    ::gloo::allgatherv(opts);
  });
}

// Gloo's gather needs equal counts: gatherv is point-to-point on unbound
// buffers (what Gloo's own gather does), in a slot space of this collective.
void GlooBackend::gatherv(const void* send, void* recv, std::span<const size_t> counts,
                          DataType dtype, int root) {
  begin(kit::make_desc(kit::OpKind::kGatherv, dtype, root, kit::hash_counts(counts)));
  size_t es = dtype_size(dtype);
  uint64_t slot = (0xE0ull << 56) | tag_;
  guarded("gather", [&] {
    if (rank_ != root) {
      if (counts[rank_] == 0) return;
      auto buf = context_->createUnboundBuffer(const_cast<void*>(send), counts[rank_] * es);
      buf->send(root, slot);
      buf->waitSend(timeout_);
      return;
    }
    std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> bufs;
    size_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      size_t n = counts[r] * es;
      if (r == rank_ && n) std::memmove(bytes(recv) + offset, send, n);
      if (r != rank_ && n) {
        bufs.push_back(context_->createUnboundBuffer(bytes(recv) + offset, n));
        bufs.back()->recv(r, slot);
      }
      offset += n;
    }
    for (auto& b : bufs) b->waitRecv(timeout_);
  });
}

void GlooBackend::scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  begin(kit::make_desc(kit::OpKind::kScatter, dtype, root, count));
  if (count == 0) return;
  size_t es = dtype_size(dtype);
  std::vector<std::byte> staging;
  void* out = recv;
  if (rank_ == root && bytes(recv) < bytes(send) + count * size_ * es &&
      bytes(send) < bytes(recv) + count * es) {
    staging.resize(count * es);
    out = staging.data();
  }
  if (size_ == 1) {
    std::memmove(out, send, count * es);
  } else {
    guarded("scatter", [&] {
      ::gloo::ScatterOptions opts(context_);
      with_width(dtype, [&](auto* t) {
        using T = std::remove_pointer_t<decltype(t)>;
        if (rank_ == root) {
          std::vector<T*> blocks(size_);
          for (int r = 0; r < size_; ++r)
            blocks[r] = static_cast<T*>(const_cast<void*>(send)) + r * count;
          opts.setInputs(blocks, count);
        }
        opts.setOutput(static_cast<T*>(out), count);
      });
      opts.setRoot(root);
      opts.setTag(tag_);
      opts.setTimeout(timeout_);
      ::gloo::scatter(opts);
    });
  }
  if (!staging.empty()) std::memcpy(recv, staging.data(), staging.size());
}

// Gloo's reduce-scatter exists only as an old-style algorithm class, which
// must not share pairs with the options API: allreduce everything, keep
// this rank's block (size x the traffic of a true reduce-scatter).
void GlooBackend::reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                                 ReduceOp op) {
  begin(kit::make_desc(kit::OpKind::kReduceScatter, dtype, -1, count, op));
  if (count == 0) return;
  size_t es = dtype_size(dtype);
  std::vector<std::byte> full(count * size_ * es);
  allreduce_impl(send, full.data(), count * size_, dtype, op);
  std::memcpy(recv, full.data() + rank_ * count * es, count * es);
}

void GlooBackend::alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                            std::span<const size_t> recv_counts, DataType dtype) {
  begin(kit::make_desc(kit::OpKind::kAlltoallv, dtype, -1, 0));
  size_t es = dtype_size(dtype);
  if (size_ == 1) {
    if (send_counts[0]) std::memcpy(recv, send, send_counts[0] * es);
    return;
  }
  guarded("alltoall", [&] {
    ::gloo::AlltoallvOptions opts(context_);
    with_width(dtype, [&](auto* t) {
      using T = std::remove_pointer_t<decltype(t)>;
      opts.setInput(static_cast<T*>(nonnull(const_cast<void*>(send))),
                    std::vector<int64_t>(send_counts.begin(), send_counts.end()));
      opts.setOutput(static_cast<T*>(nonnull(recv)),
                     std::vector<int64_t>(recv_counts.begin(), recv_counts.end()));
    });
    opts.setTag(tag_);
    opts.setTimeout(timeout_);
    ::gloo::alltoallv(opts);
  });
}

}  // namespace lockstep::comm::gloo_transport
