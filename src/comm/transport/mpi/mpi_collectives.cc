// The collectives of the MPI backend: each is the nonblocking MPI call
// polled by the watchdog (mpi_watchdog.h), plus the pieces MPI lacks
// (average, 16-bit floats, in-place conventions).
#include <climits>
#include <cstring>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "comm/kernels/reduce.h"
#include "comm/transport/mpi/mpi_comm.h"
#include "comm/transport/mpi/mpi_runtime.h"
#include "comm/transport/mpi/mpi_types.h"
#include "lockstep/base/error.h"

namespace lockstep::comm::mpi {
namespace {

// Largest element count per MPI call (MPI counts are int).
constexpr size_t kChunk = size_t{1} << 30;

const std::byte* bytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }

void divide(void* data, size_t count, DataType dtype, int divisor) {
  const void* in[1] = {data};
  kernels::reduce(dtype, ReduceOp::kAverage, in, 1, data, count, divisor);
}

std::vector<int64_t> widen(const void* src, size_t count, DataType dtype) {
  std::vector<int64_t> out(count);
  for (size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DataType::kInt8: out[i] = static_cast<const int8_t*>(src)[i]; break;
      case DataType::kUInt8: out[i] = static_cast<const uint8_t*>(src)[i]; break;
      case DataType::kInt16: out[i] = static_cast<const int16_t*>(src)[i]; break;
      default: out[i] = static_cast<const int32_t*>(src)[i]; break;
    }
  }
  return out;
}

void narrow_divided(const std::vector<int64_t>& sums, void* dst, DataType dtype, int divisor) {
  for (size_t i = 0; i < sums.size(); ++i) {
    int64_t v = sums[i] / divisor;
    switch (dtype) {
      case DataType::kInt8: static_cast<int8_t*>(dst)[i] = static_cast<int8_t>(v); break;
      case DataType::kUInt8: static_cast<uint8_t*>(dst)[i] = static_cast<uint8_t>(v); break;
      case DataType::kInt16: static_cast<int16_t*>(dst)[i] = static_cast<int16_t>(v); break;
      default: static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v); break;
    }
  }
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  return a_bytes && b_bytes && bytes(a) < bytes(b) + b_bytes && bytes(b) < bytes(a) + a_bytes;
}

int as_int(size_t n, const char* what) {
  if (n > INT_MAX)
    throw InvalidArgument(
        fmt::format("{}: {} elements exceed MPI's int count; split the message", what, n));
  return static_cast<int>(n);
}

}  // namespace

std::vector<int> MpiBackend::to_ints(std::span<const size_t> counts, const char* what) const {
  std::vector<int> out(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) out[i] = as_int(counts[i], what);
  return out;
}

std::vector<int> MpiBackend::displacements(std::span<const int> counts, const char* what) const {
  std::vector<int> displs(counts.size());
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = as_int(at, what);
    at += static_cast<size_t>(counts[i]);
  }
  as_int(at, what);
  return displs;
}

void MpiBackend::wide_average(const void* send, void* recv, size_t in_count, size_t out_count,
                              DataType dtype, int root, kit::OpKind kind) {
  std::vector<int64_t> in = widen(send, in_count, dtype);
  std::vector<int64_t> out(out_count);
  MPI_Request req;
  std::string what(kit::kind_name(kind));
  int n = as_int(out_count, what.c_str());
  if (kind == kit::OpKind::kAllreduce)
    check(MPI_Iallreduce(in.data(), out.data(), n, MPI_INT64_T, MPI_SUM, comm_, &req), what);
  else if (kind == kit::OpKind::kReduce)
    check(MPI_Ireduce(in.data(), out.data(), n, MPI_INT64_T, MPI_SUM, root, comm_, &req), what);
  else
    check(MPI_Ireduce_scatter_block(in.data(), out.data(), n, MPI_INT64_T, MPI_SUM, comm_, &req),
          what);
  wait(req, what);
  if (kind != kit::OpKind::kReduce || rank_ == root) narrow_divided(out, recv, dtype, size_);
}

void MpiBackend::allreduce(const void* send, void* recv, size_t count, DataType dtype,
                           ReduceOp op) {
  begin(kit::make_desc(kit::OpKind::kAllreduce, dtype, -1, count, op));
  if (count == 0) return;
  if (needs_wide_average(dtype, op))
    return wide_average(send, recv, count, count, dtype, -1, kit::OpKind::kAllreduce);
  size_t es = dtype_size(dtype);
  for (size_t off = 0; off < count; off += kChunk) {
    int n = static_cast<int>(std::min(kChunk, count - off));
    MPI_Request req;
    check(
        MPI_Iallreduce(send == recv ? MPI_IN_PLACE : bytes(send) + off * es, bytes(recv) + off * es,
                       n, datatype(dtype), reduce_op(dtype, op), comm_, &req),
        "allreduce");
    wait(req, "allreduce");
  }
  if (op == ReduceOp::kAverage) divide(recv, count, dtype, size_);
}

void MpiBackend::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                        int root) {
  begin(kit::make_desc(kit::OpKind::kReduce, dtype, root, count, op));
  if (count == 0) return;
  if (needs_wide_average(dtype, op))
    return wide_average(send, recv, count, count, dtype, root, kit::OpKind::kReduce);
  size_t es = dtype_size(dtype);
  bool in_place = rank_ == root && send == recv;
  for (size_t off = 0; off < count; off += kChunk) {
    int n = static_cast<int>(std::min(kChunk, count - off));
    MPI_Request req;
    check(MPI_Ireduce(in_place ? MPI_IN_PLACE : bytes(send) + off * es,
                      rank_ == root ? bytes(recv) + off * es : nullptr, n, datatype(dtype),
                      reduce_op(dtype, op), root, comm_, &req),
          "reduce");
    wait(req, "reduce");
  }
  if (op == ReduceOp::kAverage && rank_ == root) divide(recv, count, dtype, size_);
}

void MpiBackend::broadcast(void* buffer, size_t count, DataType dtype, int root) {
  begin(kit::make_desc(kit::OpKind::kBroadcast, dtype, root, count));
  size_t es = dtype_size(dtype);
  for (size_t off = 0; off < count; off += kChunk) {
    int n = static_cast<int>(std::min(kChunk, count - off));
    MPI_Request req;
    check(MPI_Ibcast(bytes(buffer) + off * es, n, datatype(dtype), root, comm_, &req), "broadcast");
    wait(req, "broadcast");
  }
}

void MpiBackend::allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                            DataType dtype) {
  begin(kit::make_desc(kit::OpKind::kAllgatherv, dtype, -1, kit::hash_counts(counts)));
  size_t es = dtype_size(dtype);
  std::vector<int> n = to_ints(counts, "allgather");
  std::vector<int> displs = displacements(n, "allgather");
  size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const void* source = send;
  std::vector<std::byte> copy;
  if (send == bytes(recv) + displs[rank_] * es) {
    source = MPI_IN_PLACE;  // already in its slot
  } else if (overlaps(send, counts[rank_] * es, recv, total * es)) {
    copy.assign(bytes(send), bytes(send) + counts[rank_] * es);
    source = copy.data();
  }
  MPI_Request req;
  check(MPI_Iallgatherv(source, n[rank_], datatype(dtype), recv, n.data(), displs.data(),
                        datatype(dtype), comm_, &req),
        "allgather");
  wait(req, "allgather");
}

void MpiBackend::gatherv(const void* send, void* recv, std::span<const size_t> counts,
                         DataType dtype, int root) {
  begin(kit::make_desc(kit::OpKind::kGatherv, dtype, root, kit::hash_counts(counts)));
  size_t es = dtype_size(dtype);
  std::vector<int> n = to_ints(counts, "gather");
  std::vector<int> displs = displacements(n, "gather");
  const void* source = send;
  std::vector<std::byte> copy;
  if (rank_ == root) {
    size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    if (send == bytes(recv) + displs[root] * es) {
      source = MPI_IN_PLACE;
    } else if (overlaps(send, counts[root] * es, recv, total * es)) {
      copy.assign(bytes(send), bytes(send) + counts[root] * es);
      source = copy.data();
    }
  }
  MPI_Request req;
  check(MPI_Igatherv(source, n[rank_], datatype(dtype), recv, n.data(), displs.data(),
                     datatype(dtype), root, comm_, &req),
        "gather");
  wait(req, "gather");
}

void MpiBackend::scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  begin(kit::make_desc(kit::OpKind::kScatter, dtype, root, count));
  size_t es = dtype_size(dtype);
  int n = as_int(count, "scatter");
  as_int(count * size_, "scatter");
  void* target = recv;
  std::vector<std::byte> staging;
  if (rank_ == root) {
    if (recv == bytes(send) + root * count * es) {
      target = MPI_IN_PLACE;
    } else if (overlaps(send, count * size_ * es, recv, count * es)) {
      staging.resize(count * es);
      target = staging.data();
    }
  }
  MPI_Request req;
  check(MPI_Iscatter(send, n, datatype(dtype), target, n, datatype(dtype), root, comm_, &req),
        "scatter");
  wait(req, "scatter");
  if (!staging.empty()) std::memcpy(recv, staging.data(), staging.size());
}

void MpiBackend::reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                                ReduceOp op) {
  begin(kit::make_desc(kit::OpKind::kReduceScatter, dtype, -1, count, op));
  if (count == 0) return;
  if (needs_wide_average(dtype, op))
    return wide_average(send, recv, count * size_, count, dtype, -1, kit::OpKind::kReduceScatter);
  int n = as_int(count, "reduce_scatter");
  MPI_Request req;
  // In place: the input is the whole buffer; block `rank` lands at its start.
  check(MPI_Ireduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv, n, datatype(dtype),
                                  reduce_op(dtype, op), comm_, &req),
        "reduce_scatter");
  wait(req, "reduce_scatter");
  if (op == ReduceOp::kAverage) divide(recv, count, dtype, size_);
}

void MpiBackend::alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                           std::span<const size_t> recv_counts, DataType dtype) {
  begin(kit::make_desc(kit::OpKind::kAlltoallv, dtype, -1, 0));
  std::vector<int> sn = to_ints(send_counts, "alltoall");
  std::vector<int> rn = to_ints(recv_counts, "alltoall");
  if (verify_ops_ && size_ > 1) {
    // What each peer will send me must be what I expect from it; agree on
    // the verdict so every rank throws together.
    std::vector<int> incoming(size_);
    MPI_Request req;
    check(MPI_Ialltoall(sn.data(), 1, MPI_INT, incoming.data(), 1, MPI_INT, comm_, &req),
          "alltoall");
    wait(req, "alltoall");
    int bad = incoming != rn ? 1 : 0, any_bad = 0;
    check(MPI_Iallreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm_, &req), "alltoall");
    wait(req, "alltoall");
    if (any_bad) {
      std::string msg = fmt::format("ranks disagree about alltoall counts: rank {} expects", rank_);
      for (int r = 0; r < size_; ++r) msg += fmt::format(" {} from rank {},", rn[r], r);
      msg.pop_back();
      msg += "; received counts";
      for (int r = 0; r < size_; ++r) msg += fmt::format(" {}", incoming[r]);
      throw MismatchError(msg);
    }
  }
  std::vector<int> sd = displacements(sn, "alltoall");
  std::vector<int> rd = displacements(rn, "alltoall");
  MPI_Request req;
  check(MPI_Ialltoallv(send, sn.data(), sd.data(), datatype(dtype), recv, rn.data(), rd.data(),
                       datatype(dtype), comm_, &req),
        "alltoall");
  wait(req, "alltoall");
}

}  // namespace lockstep::comm::mpi
