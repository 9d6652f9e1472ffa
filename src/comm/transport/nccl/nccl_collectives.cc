// The collectives of the NCCL backend. NCCL has allreduce, broadcast,
// reduce, allgather and reduce_scatter; the variable-count ones (allgatherv,
// gatherv, alltoallv) and scatter are groups of ncclBroadcast or
// ncclSend/ncclRecv, which NCCL runs concurrently as one operation. A
// rank's own block never goes through NCCL (a device-to-device copy on the
// stream). Zero counts enqueue nothing: every rank knows them.
//
// Note [NCCL block tally]
// The collectives built of several NCCL calls check their counts in pairs
// (docs/errors.md, "Invariant checks"): before enqueueing, what the layers
// above promise (one count per rank, a root and peers among the ranks, this
// rank's own block the same size on both sides of an alltoall); after the
// group, that the blocks enqueued plus the local copy add up to the buffers
// the argument checks sized: every element this rank sends is sent once,
// every element of its receive buffer written once. A block skipped or sent
// twice (a wrong condition in a loop) would otherwise leave stale memory in
// a result, or hang a peer that waits for a message never enqueued.
#include <cstring>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "comm/transport/nccl/nccl_comm.h"
#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/comm/half.h"

namespace lockstep::comm::nccl {
namespace {

const char* at(const void* base, size_t elements, size_t esize) {
  return static_cast<const char*>(base) + elements * esize;
}
char* at(void* base, size_t elements, size_t esize) {
  return static_cast<char*>(base) + elements * esize;
}

std::vector<size_t> offsets(std::span<const size_t> counts) {
  std::vector<size_t> out(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), out.begin(), size_t{0});
  return out;
}

size_t total(std::span<const size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

// Elements enqueued (or copied locally) per side, Note [NCCL block tally].
struct Tally {
  size_t sent = 0, received = 0;
};

// NCCL's in-place forms need the input at this rank's block of the output;
// any other overlap would read blocks already overwritten.
void check_no_overlap(const char* op, const void* send, size_t send_bytes, const void* recv,
                      size_t recv_bytes, const void* in_place_at) {
  if (send == in_place_at || send_bytes == 0 || recv_bytes == 0) return;
  auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  if (s < r + recv_bytes && r < s + send_bytes)
    throw InvalidArgument(fmt::format(
        "{}: the send buffer overlaps the receive buffer without being this rank's block of it "
        "(the only in-place form the nccl backend takes)",
        op));
}

// ncclRedOpCreatePreMulSum takes the factor in the element type.
struct Scalar {
  alignas(8) unsigned char bytes[8] = {};
};
Scalar scalar_of(double factor, DataType dtype) {
  Scalar s;
  auto put = [&](auto v) { std::memcpy(s.bytes, &v, sizeof v); };
  switch (dtype) {
    case DataType::kFloat16: put(float_to_f16(static_cast<float>(factor))); break;
    case DataType::kBFloat16: put(float_to_bf16(static_cast<float>(factor))); break;
    case DataType::kFloat32: put(static_cast<float>(factor)); break;
    case DataType::kFloat64: put(factor); break;
    case DataType::kInt8: put(static_cast<int8_t>(factor)); break;
    case DataType::kUInt8: put(static_cast<uint8_t>(factor)); break;
    case DataType::kInt32: put(static_cast<int32_t>(factor)); break;
    case DataType::kInt64: put(static_cast<int64_t>(factor)); break;
    case DataType::kInt16: put(static_cast<int16_t>(factor)); break;
  }
  return s;
}

}  // namespace

void NcclBackend::allreduce(const void* send, void* recv, size_t count, DataType dtype,
                            ReduceOp op) {
  allreduce_with(send, recv, count, dtype, op, nullptr);
}

// `factor` null: NCCL's `op`; else a sum of every input times *factor.
void NcclBackend::allreduce_with(const void* send, void* recv, size_t count, DataType dtype,
                                 ReduceOp op, const double* factor) {
  DeviceGuard guard(device_);
  const size_t bytes = count * dtype_size(dtype);
  check_device_buffer(send, bytes, device_, "allreduce", "send");
  check_device_buffer(recv, bytes, device_, "allreduce", "recv");
  begin(kit::make_desc(kit::OpKind::kAllreduce, dtype, -1, count, op));
  if (count == 0) return;
  if (!factor) {
    enqueued("allreduce", ncclAllReduce(send, recv, count, to_nccl(dtype), to_nccl(op),
                                        watchdog_->comm(), stream_));
  } else {
    Scalar scalar = scalar_of(*factor, dtype);
    ncclRedOp_t premul;
    watchdog_->settle(ncclRedOpCreatePreMulSum(&premul, scalar.bytes, to_nccl(dtype),
                                               ncclScalarHostImmediate, watchdog_->comm()),
                      "ncclRedOpCreatePreMulSum", Clock::now());
    const ncclResult_t result =
        ncclAllReduce(send, recv, count, to_nccl(dtype), premul, watchdog_->comm(), stream_);
    // An operator may go as soon as the last call given it has returned (nccl.h).
    ncclRedOpDestroy(premul, watchdog_->comm());
    enqueued("allreduce (pre-multiplied sum)", result);
  }
  finish();
}

void NcclBackend::allreduce_scaled(const void* send, void* recv, size_t count, DataType dtype,
                                   double factor) {
  allreduce_with(send, recv, count, dtype, ReduceOp::kSum, &factor);
}

void NcclBackend::broadcast(void* buffer, size_t count, DataType dtype, int root) {
  DeviceGuard guard(device_);
  LOCKSTEP_DCHECK(root >= 0 && root < size_, "nccl broadcast: root {} of {} ranks", root, size_);
  check_device_buffer(buffer, count * dtype_size(dtype), device_, "broadcast", "data");
  begin(kit::make_desc(kit::OpKind::kBroadcast, dtype, root, count));
  if (count == 0) return;
  enqueued("broadcast",
           ncclBroadcast(buffer, buffer, count, to_nccl(dtype), root, watchdog_->comm(), stream_));
  finish();
}

// Note [One rank reduces by copying]
// Every reduction of one contribution is that contribution (the average of
// one value included), so at world size 1 reduce and reduce_scatter are a
// device copy. NCCL 2.28.9's own one-rank ncclReduce and ncclReduceScatter
// left f64 elements past the first 8,000,000 bytes unwritten (counts
// 1,000,003 and 1,000,004 on an H200, in the collective matrix), while
// ncclAllReduce at the same counts was right.
void NcclBackend::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                         int root) {
  DeviceGuard guard(device_);
  LOCKSTEP_DCHECK(root >= 0 && root < size_, "nccl reduce: root {} of {} ranks", root, size_);
  const size_t bytes = count * dtype_size(dtype);
  check_device_buffer(send, bytes, device_, "reduce", "send");
  if (rank_ == root) check_device_buffer(recv, bytes, device_, "reduce", "recv");
  begin(kit::make_desc(kit::OpKind::kReduce, dtype, root, count, op));
  if (count == 0) return;
  if (size_ == 1) {  // Note [One rank reduces by copying]
    local_copy(recv, send, bytes);
    return finish();
  }
  // NCCL never writes recvbuff off the root, but checks it is not null.
  void* out = rank_ == root || recv ? recv : const_cast<void*>(send);
  enqueued("reduce", ncclReduce(send, out, count, to_nccl(dtype), to_nccl(op), root,
                                watchdog_->comm(), stream_));
  finish();
}

void NcclBackend::reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                                 ReduceOp op) {
  DeviceGuard guard(device_);
  const size_t esize = dtype_size(dtype);
  check_device_buffer(send, count * size_ * esize, device_, "reduce_scatter", "send");
  check_device_buffer(recv, count * esize, device_, "reduce_scatter", "recv");
  check_no_overlap("reduce_scatter", recv, count * esize, send, count * size_ * esize,
                   at(send, count * rank_, esize));
  begin(kit::make_desc(kit::OpKind::kReduceScatter, dtype, -1, count, op));
  if (count == 0) return;
  if (size_ == 1) {  // Note [One rank reduces by copying]
    local_copy(recv, send, count * esize);
    return finish();
  }
  enqueued("reduce_scatter", ncclReduceScatter(send, recv, count, to_nccl(dtype), to_nccl(op),
                                               watchdog_->comm(), stream_));
  finish();
}

void NcclBackend::allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                             DataType dtype) {
  DeviceGuard guard(device_);
  LOCKSTEP_DCHECK_EQ(counts.size(), static_cast<size_t>(size_),
                     "nccl allgather: one count per rank");
  const size_t esize = dtype_size(dtype);
  const std::vector<size_t> off = offsets(counts);
  check_device_buffer(send, counts[rank_] * esize, device_, "allgather", "send");
  check_device_buffer(recv, total(counts) * esize, device_, "allgather", "recv");
  check_no_overlap("allgather", send, counts[rank_] * esize, recv, total(counts) * esize,
                   at(recv, off[rank_], esize));
  begin(kit::make_desc(kit::OpKind::kAllgatherv, dtype, -1, kit::hash_counts(counts)));
  if (total(counts) == 0) return;
  ncclComm_t comm = watchdog_->comm();
  const ncclDataType_t type = to_nccl(dtype);
  Tally tally;
  if (std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; })) {
    enqueued("allgather", ncclAllGather(send, recv, counts[0], type, comm, stream_));
    tally.received = counts[0] * size_;
  } else {
    // One broadcast per rank, rooted there, all in one group.
    enqueued("allgather", grouped([&](auto keep) {
               for (int r = 0; r < size_; ++r) {
                 if (counts[r] == 0) continue;
                 void* block = at(recv, off[r], esize);
                 keep(ncclBroadcast(r == rank_ ? send : block, block, counts[r], type, r, comm,
                                    stream_));
                 tally.received += counts[r];
               }
             }));
  }
  LOCKSTEP_DCHECK_EQ(tally.received, total(counts), "nccl allgather: every block received once");
  finish();
}

void NcclBackend::gatherv(const void* send, void* recv, std::span<const size_t> counts,
                          DataType dtype, int root) {
  DeviceGuard guard(device_);
  LOCKSTEP_DCHECK_EQ(counts.size(), static_cast<size_t>(size_), "nccl gather: one count per rank");
  LOCKSTEP_DCHECK(root >= 0 && root < size_, "nccl gather: root {} of {} ranks", root, size_);
  const size_t esize = dtype_size(dtype);
  const std::vector<size_t> off = offsets(counts);
  check_device_buffer(send, counts[rank_] * esize, device_, "gather", "send");
  if (rank_ == root) check_device_buffer(recv, total(counts) * esize, device_, "gather", "recv");
  begin(kit::make_desc(kit::OpKind::kGatherv, dtype, root, kit::hash_counts(counts)));
  if (total(counts) == 0) return;
  ncclComm_t comm = watchdog_->comm();
  const ncclDataType_t type = to_nccl(dtype);
  Tally tally;
  if (rank_ == root) {
    local_copy(at(recv, off[root], esize), send, counts[root] * esize);
    tally.sent = tally.received = counts[root];
  }
  enqueued("gather", grouped([&](auto keep) {
             if (rank_ != root) {
               if (counts[rank_] > 0)
                 keep(ncclSend(send, counts[rank_], type, root, comm, stream_));
               tally.sent = counts[rank_];
               return;
             }
             for (int r = 0; r < size_; ++r)
               if (r != root && counts[r] > 0) {
                 keep(ncclRecv(at(recv, off[r], esize), counts[r], type, r, comm, stream_));
                 tally.received += counts[r];
               }
           }));
  LOCKSTEP_DCHECK_EQ(tally.sent, counts[rank_], "nccl gather: this rank's block sent once");
  LOCKSTEP_DCHECK_EQ(tally.received, rank_ == root ? total(counts) : 0,
                     "nccl gather: the root receives every block once");
  finish();
}

void NcclBackend::scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  DeviceGuard guard(device_);
  LOCKSTEP_DCHECK(root >= 0 && root < size_, "nccl scatter: root {} of {} ranks", root, size_);
  const size_t esize = dtype_size(dtype);
  if (rank_ == root) check_device_buffer(send, count * size_ * esize, device_, "scatter", "send");
  check_device_buffer(recv, count * esize, device_, "scatter", "recv");
  begin(kit::make_desc(kit::OpKind::kScatter, dtype, root, count));
  if (count == 0) return;
  ncclComm_t comm = watchdog_->comm();
  const ncclDataType_t type = to_nccl(dtype);
  Tally tally;
  if (rank_ == root) {
    local_copy(recv, at(send, count * root, esize), count * esize);
    tally.sent = tally.received = count;
  }
  enqueued("scatter", grouped([&](auto keep) {
             if (rank_ != root) {
               keep(ncclRecv(recv, count, type, root, comm, stream_));
               tally.received = count;
               return;
             }
             for (int r = 0; r < size_; ++r)
               if (r != root) {
                 keep(ncclSend(at(send, count * r, esize), count, type, r, comm, stream_));
                 tally.sent += count;
               }
           }));
  LOCKSTEP_DCHECK_EQ(tally.received, count, "nccl scatter: this rank's block received once");
  LOCKSTEP_DCHECK_EQ(tally.sent, rank_ == root ? count * size_ : 0,
                     "nccl scatter: the root sends every block once");
  finish();
}

void NcclBackend::alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                            std::span<const size_t> recv_counts, DataType dtype) {
  DeviceGuard guard(device_);
  LOCKSTEP_DCHECK(send_counts.size() == static_cast<size_t>(size_) &&
                      recv_counts.size() == static_cast<size_t>(size_),
                  "nccl alltoall: {} send and {} receive counts for {} ranks", send_counts.size(),
                  recv_counts.size(), size_);
  // The own block is one local copy: what this rank sends itself is what it receives.
  LOCKSTEP_DCHECK_EQ(send_counts[rank_], recv_counts[rank_],
                     "nccl alltoall: this rank's own block");
  const size_t esize = dtype_size(dtype);
  const std::vector<size_t> soff = offsets(send_counts), roff = offsets(recv_counts);
  check_device_buffer(send, total(send_counts) * esize, device_, "alltoall", "send");
  check_device_buffer(recv, total(recv_counts) * esize, device_, "alltoall", "recv");
  begin(kit::make_desc(kit::OpKind::kAlltoallv, dtype, -1, 0));
  ncclComm_t comm = watchdog_->comm();
  const ncclDataType_t type = to_nccl(dtype);
  local_copy(at(recv, roff[rank_], esize), at(send, soff[rank_], esize),
             recv_counts[rank_] * esize);
  Tally tally{.sent = send_counts[rank_], .received = recv_counts[rank_]};
  enqueued("alltoall", grouped([&](auto keep) {
             for (int r = 0; r < size_; ++r) {
               if (r == rank_) continue;
               if (send_counts[r] > 0) {
                 keep(ncclSend(at(send, soff[r], esize), send_counts[r], type, r, comm, stream_));
                 tally.sent += send_counts[r];
               }
               if (recv_counts[r] > 0) {
                 keep(ncclRecv(at(recv, roff[r], esize), recv_counts[r], type, r, comm, stream_));
                 tally.received += recv_counts[r];
               }
             }
           }));
  LOCKSTEP_DCHECK_EQ(tally.sent, total(send_counts), "nccl alltoall: every block sent once");
  LOCKSTEP_DCHECK_EQ(tally.received, total(recv_counts),
                     "nccl alltoall: every block received once");
  finish();
}

// Tags are not carried by NCCL: messages between a pair match in order.
void NcclBackend::send(const void* buffer, size_t count, DataType dtype, int peer, int /*tag*/) {
  DeviceGuard guard(device_);
  LOCKSTEP_DCHECK(peer >= 0 && peer < size_ && peer != rank_, "nccl send: peer {} of {} ranks",
                  peer, size_);
  check_device_buffer(buffer, count * dtype_size(dtype), device_, "send", "data");
  watchdog_->check_usable();
  if (count == 0) return;
  // The peer is the one rank a point-to-point wait depends on: name it.
  enqueued(fmt::format("send to rank {}", peer),
           ncclSend(buffer, count, to_nccl(dtype), peer, watchdog_->comm(), stream_));
  finish();
}

void NcclBackend::recv(void* buffer, size_t count, DataType dtype, int peer, int /*tag*/) {
  DeviceGuard guard(device_);
  LOCKSTEP_DCHECK(peer >= 0 && peer < size_ && peer != rank_, "nccl recv: peer {} of {} ranks",
                  peer, size_);
  check_device_buffer(buffer, count * dtype_size(dtype), device_, "recv", "data");
  watchdog_->check_usable();
  if (count == 0) return;
  enqueued(fmt::format("recv from rank {}", peer),
           ncclRecv(buffer, count, to_nccl(dtype), peer, watchdog_->comm(), stream_));
  finish();
}

}  // namespace lockstep::comm::nccl
