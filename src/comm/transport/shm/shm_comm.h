// Internal: the shared-memory Backend implementation (see shm_backend.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>
#include <string>

#include "comm/transport/shm/segment.h"
#include "comm/transport/shm/sync.h"
#include "lockstep/comm/backend.h"
#include "lockstep/comm/world.h"
#include "lockstep/policy/shm_algorithm.h"

namespace lockstep::comm::shm {

// Knobs that pick algorithms (LOCKSTEP_SHM_*; docs/shm.md). Which algorithm
// runs is policy::shm_allreduce_choice's answer (Note [One decision]).
struct ShmTuning {
  policy::ShmPolicy policy;
  bool legacy = false;      // policy.algorithm == "legacy", read per call
  size_t stream_bytes = 0;  // allreduce: non-temporal result stores at or above
  size_t cma_bytes = 0;     // allreduce of 2 ranks: single-copy path at or above
  bool cma = false;         // LOCKSTEP_SHM_CMA=on: the single-copy path is allowed
};

// Helpers of the collectives' sources, defined once here: a target's
// sources compile in unity batches (docs/ci.md), where two files' helpers
// of the same name would collide.
inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
// memcpy that accepts n == 0 (null buffers) and an in-place call.
inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n && dst != src) std::memcpy(dst, src, n);
}

// Splits `count` elements into `parts` cache-line-aligned (64 B) ranges;
// part r is [begin(r), end(r)).
struct Partition {
  size_t per;
  size_t count;
  Partition(size_t count, int parts, size_t elem)
      : per(round_up_to(ceil_div_by(count, static_cast<size_t>(parts)),
                        std::max<size_t>(1, 64 / elem))),
        count(count) {}
  size_t begin(int r) const { return std::min(count, per * r); }
  size_t end(int r) const { return std::min(count, per * (r + 1)); }
  static size_t ceil_div_by(size_t a, size_t b) { return (a + b - 1) / b; }
  static size_t round_up_to(size_t x, size_t a) { return ceil_div_by(x, a) * a; }
};

// Where the pipelined two_step puts chunk c in a rank's two slots (Note
// [Pipelined two-step] in shm_pipeline.cc): three places of half a slot,
// the first in slot `parity` (the collective's first fill).
struct PipelineLayout {
  size_t slot_bytes;
  size_t parity;
  size_t offset(size_t chunk) const {
    const size_t place[3] = {parity * slot_bytes, (1 - parity) * slot_bytes,
                             parity * slot_bytes + slot_bytes / 2};
    return place[chunk % 3];
  }
  // Fills to add after a pipeline of `chunks` chunks that took one fill, so
  // the next collective's first fill (slot fills & 1) misses the last chunk,
  // which peers may still be copying out.
  uint64_t extra_fills(size_t chunks) const {
    const size_t last_slot = offset(chunks - 1) >= slot_bytes ? 1 : 0;
    return last_slot == 1 - parity ? 1 : 0;
  }
};

// One two-level allreduce's arguments and derived sizes (shm_two_level.cc).
struct TwoLevelCall {
  const void* send;
  void* recv;
  DataType dtype;
  ReduceOp op;
  size_t es;            // element bytes
  DataType acc;         // the type prefixes are kept in (reduce()'s accumulator)
  size_t acc_size = 0;  // its bytes
  size_t count = 0;     // elements of the message
  size_t chunk = 0;     // elements per chunk
  size_t result = 0;    // offset of the share's prefix / result in a rank's buffer
  void (*deliver)(void*, const void*, size_t) = nullptr;  // into recv: plain or streaming
};
// One rank's share of one chunk, in elements: the chunk's offset in the
// message and length, the share's offset in the chunk and length.
struct TwoLevelShare {
  size_t off, m, lo, n;
};

// OpDesc::flags of an allreduce taking the single-copy path.
inline constexpr uint8_t kSingleCopyFlag = 1;

class ShmBackend final : public Backend {
 public:
  ShmBackend(const WorldInfo& world, std::unique_ptr<Segment> segment, kit::WaitPolicy policy,
             ShmTuning tuning);
  ~ShmBackend() override;

  std::string_view name() const override { return "shm"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void set_idle_probe(const std::atomic<int>* blocked) override {
    if (waiter_) waiter_->set_idle_probe(blocked);
  }
  // With the node groups resolved at attach (LOCKSTEP_SHM_NODES=auto),
  // which the knobs alone do not tell.
  std::string allreduce_algorithm(size_t bytes, size_t elem_bytes, bool root_only) const override;

  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) override;
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
              int root) override;
  void broadcast(void* buffer, size_t count, DataType dtype, int root) override;
  void allgatherv(const void* send, void* recv, std::span<const size_t> counts,
                  DataType dtype) override;
  void gatherv(const void* send, void* recv, std::span<const size_t> counts, DataType dtype,
               int root) override;
  void scatter(const void* send, void* recv, size_t count, DataType dtype, int root) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                      ReduceOp op) override;
  void alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                 std::span<const size_t> recv_counts, DataType dtype) override;
  void barrier() override;
  void send(const void* buffer, size_t count, DataType dtype, int peer, int tag) override;
  void recv(void* buffer, size_t count, DataType dtype, int peer, int tag) override;

 private:
  // Step machinery (shm_backend.cc).
  void begin(const kit::OpDesc& desc);
  int next_buffer() { return static_cast<int>(fills_++ & 1); }
  void arrive();
  void wait_all();
  // One step: linear (arrive, then wait for every peer) or a dissemination
  // barrier over the same step counters (Note [Dissemination steps]).
  void step();
  void first_step();  // step + descriptor comparison
  // Every rank throws MismatchError(message) after the same step, leaving
  // the buffer parity aligned (Note [Buffer parity]).
  [[noreturn]] void fail_mismatch(const std::string& message);
  std::byte* slot(int r, int buffer) { return segment_->slot(r, buffer); }

  // Algorithms (shm_collectives.cc).
  // policy::shm_allreduce_choice for this communicator, remembered for the
  // last (bytes, element size).
  policy::ShmChoice choose(size_t bytes, size_t elem_bytes);
  // A reduce's: two_step where the allreduce would run two_level.
  static policy::ShmChoice for_reduce(policy::ShmChoice choice);
  void allreduce_any(const policy::ShmChoice& choice, const void* send, void* recv, size_t count,
                     DataType dtype, ReduceOp op, int root);
  void allreduce_small(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                       int root);
  // Two steps per chunk: the legacy two_step (LOCKSTEP_SHM_ALGORITHM=legacy).
  void allreduce_large(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                       int root, size_t chunk_bytes);
  // One step per chunk (shm_pipeline.cc, Note [Pipelined two-step]).
  void allreduce_pipelined(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                           int root, size_t chunk_bytes);
  // Two-level (shm_two_level.cc, Note [Two-level allreduce]); allreduce only.
  void allreduce_two_level(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                           size_t chunk_bytes);
  // Local rank l's share of chunk c; the phases of chunk c in `buffer`.
  TwoLevelShare two_level_share(const TwoLevelCall& call, size_t c, int l) const;
  void two_level_stage(const TwoLevelCall& call, size_t c, int buffer);
  void reduce_share(const TwoLevelCall& call, size_t c, int buffer);
  void two_level_final(const TwoLevelCall& call, size_t c, int buffer);
  void two_level_copy_out(const TwoLevelCall& call, size_t c, int buffer);
  // Whether rank r is on another node group than this rank (traffic counts).
  bool across(int r) const { return r / local_ != rank_ / local_; }
  // Bytes this rank read from / wrote to the segment in the current call
  // (comm::segment_traffic), published under the call's algorithm name.
  void flush_traffic(std::string_view algorithm);
  // Single-copy (CMA) allreduce of two ranks (shm_cma.cc).
  bool wants_cma(size_t bytes, int root) const;
  bool cma_agreed();  // the first-use probe; after first_step()
  void allreduce_cma(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  void cma_read_or_abort(void* local, uint64_t remote, size_t bytes, int peer);
  void exchange_blocks(const void* send, void* recv, std::span<const size_t> counts, DataType dtype,
                       int root);

  int rank_;
  int size_;
  std::unique_ptr<Segment> segment_;
  std::optional<Waiter> waiter_;     // absent when size() == 1
  std::vector<const void*> inputs_;  // reduction operands, reused across calls
  ShmTuning tuning_;
  policy::ShmSync sync_ = policy::ShmSync::kLinear;
  policy::ShmChoice chosen_;
  size_t chosen_for_[2] = {SIZE_MAX, 0};  // bytes, element size of chosen_
  // Node groups of this communicator (policy::shm_node_groups of the policy
  // whose nodes make_backend resolved) and ranks per group: 1 and size_
  // when the ranks form none.
  int groups_ = 1;
  int local_ = 1;
  std::vector<std::byte> scratch_;  // two_level: widened contributions
  uint64_t seg_read_ = 0;
  uint64_t seg_written_ = 0;
  uint64_t seg_cross_ = 0;  // the part of seg_read_ staged on another node group
  uint32_t step_ = 0;
  uint64_t fills_ = 0;
  uint64_t fills_at_begin_ = 0;  // fills_ when the current collective began
  uint64_t seq_ = 0;
  kit::OpKind op_kind_ = kit::OpKind::kBarrier;
  // False until every rank has arrived at the current collective's first
  // step: later steps wait on peers known to be working on the same call.
  bool peers_arrived_ = false;
  // Whether both ranks can read each other by CMA: probed once, at the
  // first allreduce large enough for it, and the same on both ranks.
  enum class Cma { kUnknown, kOn, kOff } cma_ = Cma::kUnknown;
};

}  // namespace lockstep::comm::shm
