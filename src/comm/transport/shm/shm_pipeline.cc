// The pipelined two-step allreduce (reduce-scatter + all-gather through the
// segment, one step per cache-sized chunk); docs/shm.md derives its cost.
#include <algorithm>
#include <cstring>

#include "comm/kernels/copy.h"
#include "comm/kernels/reduce.h"
#include "comm/transport/shm/shm_comm.h"

namespace lockstep::comm::shm {
namespace {

const std::byte* as_bytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* as_bytes(void* p) { return static_cast<std::byte*>(p); }

}  // namespace

// Note [Pipelined two-step]
// Chunk c of the message goes through three phases, each in a later interval
// between steps: stage (every rank copies the chunk, all but its own share,
// into its buffer), reduce (rank r reduces share r from every rank's buffer
// and its private input, in rank order, into its own buffer, and delivers
// it), copy out (every rank copies the other shares' results). Before step
// j a rank stages chunk j, reduces chunk j-1 and copies out chunk j-2, so K
// chunks take K+1 steps instead of 2K, and the three phases of different
// chunks share each interval. Buffers rotate over three places in the
// rank's two slots: chunk j's buffer is read by peers until they copy it out
// before step j+2, and rewritten for chunk j+3 after step j+2.
// The collective's first buffer is the parity buffer (Note [Buffer
// parity]), the only one whose readers finished before this collective
// began; the others are used after the first step, which every rank reaches
// only after finishing the previous collective. At the end, peers may still
// copy out the last chunk, so the fill counter is left with the parity of
// the other slot: the next collective's first fill does not touch it.
void ShmBackend::allreduce_pipelined(const void* send, void* recv, size_t count, DataType dtype,
                                     ReduceOp op, int root, size_t chunk_bytes) {
  const size_t es = dtype_size(dtype);
  const size_t S = segment_->slot_bytes();
  // Three buffers of a chunk in 2S bytes, the first within the parity slot.
  const size_t chunk = std::max<size_t>(1, std::min(chunk_bytes, S / 2) / es);
  const size_t chunks = std::max<size_t>(1, ceil_div(count, chunk));
  const bool receive = root < 0 || root == rank_;
  auto deliver = count * es >= tuning_.stream_bytes ? &kernels::copy_streaming : &copy_bytes;
  const PipelineLayout layout{S, static_cast<size_t>(next_buffer())};
  auto buffer = [&](int r, size_t c) { return slot(r, 0) + layout.offset(c); };
  auto span = [&](size_t c) {  // {first element, elements} of chunk c
    size_t off = std::min(count, c * chunk);
    return std::pair<size_t, size_t>{off, std::min(chunk, count - off)};
  };
  auto stage = [&](size_t c) {
    auto [off, m] = span(c);
    Partition part(m, size_, es);
    size_t lo = part.begin(rank_), hi = part.end(rank_);
    const std::byte* in = as_bytes(send) + off * es;
    copy_bytes(buffer(rank_, c), in, lo * es);
    copy_bytes(buffer(rank_, c) + hi * es, in + hi * es, (m - hi) * es);
    seg_written_ += (m - (hi - lo)) * es;
  };
  auto reduce = [&](size_t c) {
    auto [off, m] = span(c);
    Partition part(m, size_, es);
    size_t lo = part.begin(rank_), hi = part.end(rank_);
    if (hi == lo) return;
    for (int r = 0; r < size_; ++r)
      inputs_[r] = r == rank_ ? as_bytes(send) + (off + lo) * es : buffer(r, c) + lo * es;
    std::byte* mine = buffer(rank_, c) + lo * es;
    kernels::reduce(dtype, op, inputs_.data(), size_, mine, hi - lo, size_);
    seg_read_ += (size_ - 1) * (hi - lo) * es;
    seg_cross_ += (size_ - local_) * (hi - lo) * es;
    seg_written_ += (hi - lo) * es;
    if (receive) deliver(as_bytes(recv) + (off + lo) * es, mine, (hi - lo) * es);
  };
  auto copy_out = [&](size_t c) {
    if (!receive) return;
    auto [off, m] = span(c);
    Partition part(m, size_, es);
    for (int i = 1; i < size_; ++i) {  // from the next rank's share on (staggered reads)
      int r = (rank_ + i) % size_;
      size_t lo = part.begin(r), hi = part.end(r);
      deliver(as_bytes(recv) + (off + lo) * es, buffer(r, c) + lo * es, (hi - lo) * es);
      seg_read_ += (hi - lo) * es;
      if (across(r)) seg_cross_ += (hi - lo) * es;
    }
  };
  for (size_t j = 0; j <= chunks; ++j) {
    if (j < chunks) stage(j);
    if (j >= 1) reduce(j - 1);
    if (j >= 2) copy_out(j - 2);
    if (j == 0)
      first_step();
    else
      step();
  }
  copy_out(chunks - 1);
  fills_ += layout.extra_fills(chunks);
}

}  // namespace lockstep::comm::shm
