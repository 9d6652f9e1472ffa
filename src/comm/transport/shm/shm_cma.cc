// The single-copy allreduce of two ranks on one host.
//
// Note [Single-copy allreduce]
// The staged path (allreduce_large) moves, per rank and per N bytes, 2.5 N
// read and 2 N written through the segment's slots. Here each rank reads the
// peer's memory directly with process_vm_readv (CMA):
//   1. both publish their input and output addresses, then the first step;
//   2. rank r reads the peer's input for r's half into its private slot
//      (slot-sized pieces, so they stay in cache) and reduces its own input
//      and that copy, in rank order, into out[lo, hi);
//   3. step: both halves are final;
//   4. rank r reads the peer's finished half from the peer's output straight
//      into its own;
//   5. step: the peer has finished reading our output (and, in place, our
//      input), so the caller may reuse them when we return.
// Per rank: 2 N read, 1.5 N written, three steps per call whatever N. The
// result is bitwise the staged path's: the same kernel, operands in rank
// order, element by element. In place (send == recv) works: phase 2 writes
// only the peer's half of our buffer, which the peer read before step 3, and
// the peer overwrites the input half we read only after step 3.
// CMA needs ptrace permission between the ranks (same user; under Yama scope
// 1 a declared ptracer, see allow_reads_by); containers may forbid it. The
// first eligible call probes it on both ranks and both keep the answer for
// the communicator's life, so both always take the same path. A CMA call
// that fails after a successful probe is a bug (an address the caller freed
// mid-call): the communicator aborts with the errno instead of hanging.
#include <sys/types.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "comm/kernels/reduce.h"
#include "comm/transport/shm/cma.h"
#include "comm/transport/shm/shm_comm.h"
#include "lockstep/base/error.h"
#include "lockstep/base/log.h"

namespace lockstep::comm::shm {
namespace {

// Probe answers in RankLine::cma_probe.
constexpr uint32_t kProbeOk = 1;
constexpr uint32_t kProbeErrnoBase = 1000;  // kProbeErrnoBase + errno: the read failed

// Pieces of the peer's input staged in our slot before they are reduced:
// small enough to stay in L2 between the read and the reduction.
constexpr size_t kPieceBytes = 256 * 1024;

uint64_t address(const void* p) { return reinterpret_cast<uint64_t>(p); }

std::string probe_failure(int rank, uint32_t answer) {
  return fmt::format("rank {} could not read its peer ({})", rank,
                     std::strerror(static_cast<int>(answer - kProbeErrnoBase)));
}

}  // namespace

bool ShmBackend::wants_cma(size_t bytes, int root) const {
  return size_ == 2 && root < 0 && tuning_.cma && cma_ != Cma::kOff && bytes >= tuning_.cma_bytes;
}

// Both ranks try one small read of the other's input and publish the answer;
// after one more step both decide the same way.
bool ShmBackend::cma_agreed() {
  if (cma_ != Cma::kUnknown) return cma_ == Cma::kOn;
  int peer = 1 - rank_;
  const RankLine& theirs = segment_->rank_line(peer);
  char probe;
  int err = cma_read(theirs.pid.load(), &probe, theirs.cma_send, 1);
  segment_->rank_line(rank_).cma_probe.store(err == 0 ? kProbeOk : kProbeErrnoBase + err);
  step();
  uint32_t answer = theirs.cma_probe.load();
  cma_ = err == 0 && answer == kProbeOk ? Cma::kOn : Cma::kOff;
  if (cma_ == Cma::kOn) {
    log(LogLevel::kDebug, "shm: single-copy (CMA) allreduce on for messages of {} bytes or more",
        tuning_.cma_bytes);
  } else {
    std::string why =
        err != 0 ? probe_failure(rank_, kProbeErrnoBase + err) : probe_failure(peer, answer);
    log(LogLevel::kDebug, "shm: single-copy (CMA) allreduce unavailable, using the staged path: {}",
        why);
  }
  return cma_ == Cma::kOn;
}

void ShmBackend::cma_read_or_abort(void* local, uint64_t remote, size_t bytes, int peer) {
  int err = cma_read(segment_->rank_line(peer).pid.load(), local, remote, bytes);
  if (err == 0) return;
  // A peer that died mid-call (ESRCH) is reported as such: its step never
  // comes, so the wait throws PeerFailure naming it.
  if (!waiter_->peer_alive(peer)) step();
  std::string reason = fmt::format(
      "shm allreduce: rank {} could not read {} bytes of rank {}'s buffer by CMA ({}); was a "
      "buffer freed or unmapped during the call?",
      rank_, bytes, peer, std::strerror(err));
  waiter_->abort(reason);
  throw Error(reason);
}

void ShmBackend::allreduce_cma(const void* send, void* recv, size_t count, DataType dtype,
                               ReduceOp op) {
  int peer = 1 - rank_;
  RankLine& mine = segment_->rank_line(rank_);
  if (cma_ == Cma::kUnknown) allow_reads_by(segment_->rank_line(peer).pid.load());
  mine.cma_send = address(send);
  mine.cma_recv = address(recv);
  first_step();
  if (!cma_agreed()) {
    return allreduce_any(choose(count * dtype_size(dtype), dtype_size(dtype)), send, recv, count,
                         dtype, op, -1);
  }
  count_cma_allreduce();

  size_t es = dtype_size(dtype);
  // Rank 0 owns [0, half), rank 1 [half, count); half is cache-line aligned.
  size_t line = std::max<size_t>(1, 64 / es);
  size_t half = std::min(count, (count / 2 + line - 1) / line * line);
  size_t lo = rank_ == 0 ? 0 : half, hi = rank_ == 0 ? half : count;
  size_t plo = rank_ == 0 ? half : 0, phi = rank_ == 0 ? count : half;
  const RankLine& theirs = segment_->rank_line(peer);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);

  std::byte* staged = slot(rank_, next_buffer());
  size_t piece = std::max<size_t>(1, std::min(kPieceBytes, segment_->slot_bytes()) / es);
  for (size_t off = lo; off < hi; off += piece) {
    size_t m = std::min(piece, hi - off);
    cma_read_or_abort(staged, theirs.cma_send + off * es, m * es, peer);
    inputs_[rank_] = in + off * es;
    inputs_[peer] = staged;
    kernels::reduce(dtype, op, inputs_.data(), 2, out + off * es, m, 2);
  }
  step();
  if (phi > plo)
    cma_read_or_abort(out + plo * es, theirs.cma_recv + plo * es, (phi - plo) * es, peer);
  step();
}

}  // namespace lockstep::comm::shm
