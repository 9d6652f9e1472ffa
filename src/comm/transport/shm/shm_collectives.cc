// The shared-memory algorithms; docs/shm.md derives their costs.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "comm/kernels/copy.h"
#include "comm/kernels/reduce.h"
#include "comm/transport/shm/shm_comm.h"
#include "lockstep/comm/traffic.h"
#include "lockstep/base/error.h"

namespace lockstep::comm::shm {
namespace {

constexpr size_t kAlign = 64;

const std::byte* bytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }

}  // namespace

void ShmBackend::allreduce(const void* send, void* recv, size_t count, DataType dtype,
                           ReduceOp op) {
  if (size_ == 1) return copy_bytes(recv, send, count * dtype_size(dtype));
  size_t bytes = count * dtype_size(dtype);
  const policy::ShmChoice choice = choose(bytes, dtype_size(dtype));
  bool cma = choice.algorithm == policy::ShmAlgorithm::kTwoStep && wants_cma(bytes, -1);
  kit::OpDesc desc = kit::make_desc(kit::OpKind::kAllreduce, dtype, -1, count, op);
  // The path is part of the descriptor, so ranks configured differently
  // (LOCKSTEP_SHM_CMA*) fail the first step together instead of each
  // following its own protocol.
  if (cma) desc.flags = kSingleCopyFlag;
  begin(desc);
  if (cma) return allreduce_cma(send, recv, count, dtype, op);
  allreduce_any(choice, send, recv, count, dtype, op, -1);
}

void ShmBackend::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                        int root) {
  if (size_ == 1) return copy_bytes(recv, send, count * dtype_size(dtype));
  const policy::ShmChoice choice = for_reduce(choose(count * dtype_size(dtype), dtype_size(dtype)));
  begin(kit::make_desc(kit::OpKind::kReduce, dtype, root, count, op));
  allreduce_any(choice, send, recv, count, dtype, op, root);
}

// The decision is a pure function of its arguments; the last one is kept,
// since training and benchmarks repeat sizes and the latency path is a few
// microseconds.
policy::ShmChoice ShmBackend::choose(size_t bytes, size_t elem_bytes) {
  if (bytes != chosen_for_[0] || elem_bytes != chosen_for_[1]) {
    chosen_ = policy::shm_allreduce_choice(tuning_.policy, size_, static_cast<int64_t>(bytes),
                                           static_cast<int>(elem_bytes));
    chosen_for_[0] = bytes;
    chosen_for_[1] = elem_bytes;
  }
  return chosen_;
}

// Two-level allreduces only (Note [Two-level allreduce]): a reduce moves
// the same bytes through two_step.
policy::ShmChoice ShmBackend::for_reduce(policy::ShmChoice choice) {
  if (choice.algorithm == policy::ShmAlgorithm::kTwoLevel)
    choice.algorithm = policy::ShmAlgorithm::kTwoStep;
  return choice;
}

std::string ShmBackend::allreduce_algorithm(size_t bytes, size_t elem_bytes, bool root_only) const {
  if (size_ < 2) return {};
  const policy::ShmChoice c = policy::shm_allreduce_choice(
      tuning_.policy, size_, static_cast<int64_t>(bytes), static_cast<int>(elem_bytes));
  return (root_only ? for_reduce(c) : c).name();
}

// After begin(): runs the algorithm policy::shm_allreduce_choice picked
// (Note [One decision]) and books its segment traffic under its name.
void ShmBackend::allreduce_any(const policy::ShmChoice& choice, const void* send, void* recv,
                               size_t count, DataType dtype, ReduceOp op, int root) {
  if (choice.algorithm == policy::ShmAlgorithm::kOneStep)
    allreduce_small(send, recv, count, dtype, op, root);
  else if (choice.algorithm == policy::ShmAlgorithm::kTwoLevel)
    allreduce_two_level(send, recv, count, dtype, op, static_cast<size_t>(choice.chunk_bytes));
  else if (!choice.pipelined)
    allreduce_large(send, recv, count, dtype, op, root, static_cast<size_t>(choice.chunk_bytes));
  else
    allreduce_pipelined(send, recv, count, dtype, op, root,
                        static_cast<size_t>(choice.chunk_bytes));
  flush_traffic(policy::algorithm_name(choice.algorithm));
}

// One step: everyone publishes the whole message, everyone reduces it all.
// Redundant arithmetic, but a single synchronisation: the latency path.
void ShmBackend::allreduce_small(const void* send, void* recv, size_t count, DataType dtype,
                                 ReduceOp op, int root) {
  int b = next_buffer();
  size_t bytes = count * dtype_size(dtype);
  copy_bytes(slot(rank_, b), send, bytes);
  seg_written_ += bytes;
  first_step();
  if (root >= 0 && root != rank_) return;
  // The sum must run in rank order, so every rank would first read rank 0's
  // lines, all at once. Asking for the peers' lines in staggered order
  // first spreads the cross-core transfers over the owners.
  if (!tuning_.legacy)
    for (int i = 1; i < size_; ++i)
      for (size_t at = 0; at < bytes; at += kAlign)
        __builtin_prefetch(slot((rank_ + i) % size_, b) + at);
  // Our own contribution is read from the caller's (cache-hot) buffer.
  for (int r = 0; r < size_; ++r) inputs_[r] = r == rank_ ? send : slot(r, b);
  kernels::reduce(dtype, op, inputs_.data(), size_, recv, count, size_);
  seg_read_ += (size_ - 1) * bytes;
  seg_cross_ += (size_ - local_) * bytes;
}

// The two_step of LOCKSTEP_SHM_ALGORITHM=legacy, as before issue 28 (the
// default is allreduce_pipelined). Per chunk, two steps: (1) every rank
// stages the chunk except its own share; (2) rank r reduces share r from the
// staged copies and its private input, in rank order, and publishes the
// result; then every rank copies the other shares out, in rank order.
void ShmBackend::allreduce_large(const void* send, void* recv, size_t count, DataType dtype,
                                 ReduceOp op, int root, size_t chunk_bytes) {
  size_t es = dtype_size(dtype);
  size_t chunk = std::max<size_t>(1, chunk_bytes / es);
  bool receive = root < 0 || root == rank_;
  // Results of a message larger than the cache are not re-read soon: stream
  // them past the cache instead of paying a read-for-ownership per line.
  auto deliver = count * es >= tuning_.stream_bytes ? &kernels::copy_streaming : &copy_bytes;
  for (size_t off = 0; off < count || off == 0; off += chunk) {
    size_t m = std::min(chunk, count - off);
    Partition part(m, size_, es);
    const std::byte* in = bytes(send) + off * es;
    std::byte* out = receive ? bytes(recv) + off * es : nullptr;
    int b = next_buffer();
    std::byte* mine = slot(rank_, b);
    size_t lo = part.begin(rank_), hi = part.end(rank_);
    copy_bytes(mine, in, lo * es);
    copy_bytes(mine + hi * es, in + hi * es, (m - hi) * es);
    seg_written_ += (m - (hi - lo)) * es;
    if (off == 0)
      first_step();
    else
      step();
    if (hi > lo) {
      for (int r = 0; r < size_; ++r) inputs_[r] = r == rank_ ? in + lo * es : slot(r, b) + lo * es;
      kernels::reduce(dtype, op, inputs_.data(), size_, mine + lo * es, hi - lo, size_);
      seg_read_ += (size_ - 1) * (hi - lo) * es;
      seg_cross_ += (size_ - local_) * (hi - lo) * es;
      seg_written_ += (hi - lo) * es;
      if (receive) deliver(out + lo * es, mine + lo * es, (hi - lo) * es);
    }
    step();
    if (!receive) continue;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      size_t rlo = part.begin(r), rhi = part.end(r);
      deliver(out + rlo * es, slot(r, b) + rlo * es, (rhi - rlo) * es);
      seg_read_ += (rhi - rlo) * es;
      if (across(r)) seg_cross_ += (rhi - rlo) * es;
    }
    if (count == 0) break;
  }
}

void ShmBackend::broadcast(void* buffer, size_t count, DataType dtype, int root) {
  if (size_ == 1) return;
  begin(kit::make_desc(kit::OpKind::kBroadcast, dtype, root, count));
  size_t total = count * dtype_size(dtype);
  size_t piece = segment_->slot_bytes();
  size_t rounds = std::max<size_t>(1, ceil_div(total, piece));
  for (size_t k = 0; k < rounds; ++k) {
    size_t off = k * piece;
    size_t n = std::min(piece, total - std::min(total, off));
    int b = next_buffer();
    if (rank_ == root) copy_bytes(slot(root, b), bytes(buffer) + off, n);
    if (k == 0)
      first_step();
    else
      step();
    if (rank_ != root) copy_bytes(bytes(buffer) + off, slot(root, b), n);
    (rank_ == root ? seg_written_ : seg_read_) += n;
  }
  flush_traffic("broadcast");
}

void ShmBackend::allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                            DataType dtype) {
  if (size_ == 1) return copy_bytes(recv, send, counts[0] * dtype_size(dtype));
  begin(kit::make_desc(kit::OpKind::kAllgatherv, dtype, -1, kit::hash_counts(counts)));
  exchange_blocks(send, recv, counts, dtype, -1);
}

void ShmBackend::gatherv(const void* send, void* recv, std::span<const size_t> counts,
                         DataType dtype, int root) {
  if (size_ == 1) return copy_bytes(recv, send, counts[0] * dtype_size(dtype));
  begin(kit::make_desc(kit::OpKind::kGatherv, dtype, root, kit::hash_counts(counts)));
  exchange_blocks(send, recv, counts, dtype, root);
}

// Every rank streams its block through its slot; receivers (all, or the
// root) copy each peer's piece to that peer's place in recv.
void ShmBackend::exchange_blocks(const void* send, void* recv, std::span<const size_t> counts,
                                 DataType dtype, int root) {
  size_t es = dtype_size(dtype);
  bool receive = root < 0 || root == rank_;
  std::vector<size_t> offset(size_ + 1, 0);
  size_t largest = 0;
  for (int r = 0; r < size_; ++r) {
    offset[r + 1] = offset[r] + counts[r] * es;
    largest = std::max(largest, counts[r] * es);
  }
  size_t mine = counts[rank_] * es;
  if (receive) copy_bytes(bytes(recv) + offset[rank_], send, mine);
  size_t piece = segment_->slot_bytes();
  size_t rounds = std::max<size_t>(1, ceil_div(largest, piece));
  for (size_t k = 0; k < rounds; ++k) {
    size_t off = k * piece;
    int b = next_buffer();
    if (off < mine) copy_bytes(slot(rank_, b), bytes(send) + off, std::min(piece, mine - off));
    if (k == 0)
      first_step();
    else
      step();
    if (!receive) continue;
    for (int r = 0; r < size_; ++r) {
      size_t block = counts[r] * es;
      if (r == rank_ || off >= block) continue;
      copy_bytes(bytes(recv) + offset[r] + off, slot(r, b), std::min(piece, block - off));
    }
  }
}

void ShmBackend::scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  size_t block = count * dtype_size(dtype);
  if (size_ == 1) return copy_bytes(recv, send, block);
  begin(kit::make_desc(kit::OpKind::kScatter, dtype, root, count));
  if (rank_ == root) copy_bytes(recv, bytes(send) + root * block, block);
  size_t sub = segment_->slot_bytes() / size_ / kAlign * kAlign;
  size_t rounds = std::max<size_t>(1, ceil_div(block, sub));
  for (size_t k = 0; k < rounds; ++k) {
    size_t off = k * sub;
    size_t n = std::min(sub, block - std::min(block, off));
    int b = next_buffer();
    if (rank_ == root)
      for (int r = 0; r < size_; ++r)
        if (r != root) copy_bytes(slot(root, b) + r * sub, bytes(send) + r * block + off, n);
    if (k == 0)
      first_step();
    else
      step();
    if (rank_ != root) copy_bytes(bytes(recv) + off, slot(root, b) + rank_ * sub, n);
  }
}

// Per round, each rank stages piece k of every block but its own; rank r
// then reduces block r's piece from all ranks in rank order. One step/round.
void ShmBackend::reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                                ReduceOp op) {
  size_t es = dtype_size(dtype);
  size_t block = count * es;
  if (size_ == 1) return copy_bytes(recv, send, block);
  begin(kit::make_desc(kit::OpKind::kReduceScatter, dtype, -1, count, op));
  size_t sub = segment_->slot_bytes() / size_ / kAlign * kAlign;
  size_t rounds = std::max<size_t>(1, ceil_div(block, sub));
  for (size_t k = 0; k < rounds; ++k) {
    size_t off = k * sub;
    size_t n = std::min(sub, block - std::min(block, off));
    int b = next_buffer();
    for (int r = 0; r < size_; ++r)
      if (r != rank_) copy_bytes(slot(rank_, b) + r * sub, bytes(send) + r * block + off, n);
    if (k == 0)
      first_step();
    else
      step();
    for (int r = 0; r < size_; ++r)
      inputs_[r] = r == rank_ ? bytes(send) + rank_ * block + off : slot(r, b) + rank_ * sub;
    kernels::reduce(dtype, op, inputs_.data(), size_, bytes(recv) + off, n / es, size_);
  }
}

void ShmBackend::alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                           std::span<const size_t> recv_counts, DataType dtype) {
  size_t es = dtype_size(dtype);
  if (size_ == 1) return copy_bytes(recv, send, send_counts[0] * es);
  begin(kit::make_desc(kit::OpKind::kAlltoallv, dtype, -1, 0));
  size_t n = static_cast<size_t>(size_);
  uint64_t* table = segment_->counts_table(seq_ & 1);
  std::vector<size_t> soff(n + 1, 0), roff(n + 1, 0);
  for (size_t j = 0; j < n; ++j) {
    table[rank_ * n + j] = send_counts[j] * es;
    table[n * n + rank_ * n + j] = recv_counts[j] * es;
    soff[j + 1] = soff[j] + send_counts[j] * es;
    roff[j + 1] = roff[j] + recv_counts[j] * es;
  }
  size_t sub = segment_->slot_bytes() / n / kAlign * kAlign;
  auto fill = [&](size_t off, int b) {
    for (size_t j = 0; j < n; ++j) {
      size_t block = send_counts[j] * es;
      if (static_cast<int>(j) != rank_ && off < block)
        copy_bytes(slot(rank_, b) + j * sub, bytes(send) + soff[j] + off,
                   std::min(sub, block - off));
    }
  };
  auto drain = [&](size_t off, int b) {
    for (size_t i = 0; i < n; ++i) {
      size_t block = recv_counts[i] * es;
      if (static_cast<int>(i) != rank_ && off < block)
        copy_bytes(bytes(recv) + roff[i] + off, slot(i, b) + rank_ * sub,
                   std::min(sub, block - off));
    }
  };
  int b = next_buffer();
  fill(0, b);
  first_step();
  // Every rank checks every pair, so all fail together on a mismatch.
  size_t largest = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      uint64_t sends = table[i * n + j], expects = table[n * n + j * n + i];
      if (sends != expects)
        fail_mismatch(fmt::format(
            "alltoall: rank {} sends {} bytes to rank {}, which expects {} bytes from it", i, sends,
            j, expects));
      largest = std::max<size_t>(largest, sends);
    }
  copy_bytes(bytes(recv) + roff[rank_], bytes(send) + soff[rank_], send_counts[rank_] * es);
  drain(0, b);
  size_t rounds = std::max<size_t>(1, ceil_div(largest, sub));
  for (size_t k = 1; k < rounds; ++k) {
    b = next_buffer();
    fill(k * sub, b);
    step();
    drain(k * sub, b);
  }
}

}  // namespace lockstep::comm::shm
