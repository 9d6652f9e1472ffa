#include "comm/transport/shm/shm_backend.h"

#include <unistd.h>

#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "comm/transport/shm/numa.h"
#include "comm/transport/shm/shm_comm.h"
#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"
#include "lockstep/comm/traffic.h"

namespace lockstep::comm::shm {
namespace {

ShmTuning tuning_from_knobs() {
  ShmTuning tuning;
  tuning.policy = policy::ShmPolicy::from_knobs();
  tuning.legacy = tuning.policy.algorithm == "legacy";
  tuning.stream_bytes =
      parse_bytes(knob_string("LOCKSTEP_SHM_STREAM_BYTES"), "LOCKSTEP_SHM_STREAM_BYTES");
  tuning.cma = knob_choice("LOCKSTEP_SHM_CMA") == "on";
  tuning.cma_bytes = parse_bytes(knob_string("LOCKSTEP_SHM_CMA_BYTES"), "LOCKSTEP_SHM_CMA_BYTES");
  return tuning;
}

// What every rank must agree on for the algorithms to match (FNV-1a).
uint64_t policy_fingerprint(const policy::ShmPolicy& p) {
  std::string text = fmt::format("{}|{}|{}|{}|{}|{}", p.algorithm, p.sync, p.small_bytes,
                                 p.chunk_bytes, p.host_cores, p.nodes);
  uint64_t h = 1469598103934665603ull;
  for (char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

bool differ_only_in_path(std::vector<kit::OpDesc> all) {
  for (kit::OpDesc& d : all) d.flags = 0;
  return kit::all_equal(all);
}

std::string path_mismatch_message(const std::vector<kit::OpDesc>& all) {
  std::string on, off;
  for (size_t r = 0; r < all.size(); ++r)
    ((all[r].flags & kSingleCopyFlag) ? on : off) += fmt::format(" {}", r);
  return fmt::format(
      "{}: ranks{} would take the single-copy (CMA) path and ranks{} the staged one: set "
      "LOCKSTEP_SHM_CMA and LOCKSTEP_SHM_CMA_BYTES the same on every rank",
      kit::describe(all[0]), on, off);
}

// LOCKSTEP_SHM_NODES for this communicator, once every rank has published
// its node: auto becomes the groups the ranks' nodes form (numa.h), a number
// that does not split the ranks becomes 1 (policy::shm_node_groups), either
// with a debug line saying why the flat algorithms run.
int resolve_nodes(const policy::ShmPolicy& policy, Segment& segment, int size) {
  std::string why;
  int groups = policy::shm_node_groups(policy, size);
  if (policy.nodes == 0) {
    std::vector<int> nodes(size);
    for (int r = 0; r < size; ++r) nodes[r] = segment.rank_line(r).node;
    groups = groups_from_nodes(nodes, &why);
  } else if (policy.nodes > 1 && groups == 1) {
    why = fmt::format(
        "LOCKSTEP_SHM_NODES={} does not split {} ranks into equal groups of at "
        "least 2",
        policy.nodes, size);
  }
  if (!why.empty()) log(LogLevel::kDebug, "shm: no two-level allreduce ({}): flat algorithms", why);
  return groups;
}

}  // namespace

std::unique_ptr<Backend> make_backend(const WorldInfo& world, const std::string& tag) {
  if (world.size > 1 && world.job_id.empty())
    throw InvalidArgument(
        "LOCKSTEP_JOB_ID is not set but the job has several ranks: start workers with "
        "`lockstep run -np N`, which names the job's shared memory");
  size_t slot = parse_bytes(knob_string("LOCKSTEP_SHM_SLOT_BYTES"), "LOCKSTEP_SHM_SLOT_BYTES");
  if (slot < 4096 || slot % 4096 != 0)
    throw InvalidArgument(fmt::format(
        "LOCKSTEP_SHM_SLOT_BYTES={} must be a multiple of 4096 and at least 4096", slot));
  ShmTuning tuning = tuning_from_knobs();
  if (slot / static_cast<size_t>(world.size) < 256)
    throw InvalidArgument(
        fmt::format("LOCKSTEP_SHM_SLOT_BYTES={} is too small for {} ranks: use at least {}", slot,
                    world.size, 256 * world.size));
  auto policy = kit::WaitPolicy::from_knobs(world.local_size);
  std::unique_ptr<Segment> segment;
  if (world.size > 1) {
    std::string name = fmt::format("/lockstep-{}-{}", world.job_id, tag);
    segment =
        Segment::open(name, world.rank, world.size, slot, 64 * 1024 + kP2pHeaderBytes,
                      policy_fingerprint(tuning.policy),
                      "LOCKSTEP_SHM_ALGORITHM, _SYNC, _SMALL_BYTES, _CHUNK_BYTES or _NODES",
                      tuning.policy.nodes == 0 ? this_process_numa_node() : -1, policy.timeout);
    tuning.policy.nodes = resolve_nodes(tuning.policy, *segment, world.size);
  }
  return std::make_unique<ShmBackend>(world, std::move(segment), policy, tuning);
}

ShmBackend::ShmBackend(const WorldInfo& world, std::unique_ptr<Segment> segment,
                       kit::WaitPolicy policy, ShmTuning tuning)
    : rank_(world.rank),
      size_(world.size),
      segment_(std::move(segment)),
      waiter_(segment_ ? std::optional<Waiter>(std::in_place, *segment_, rank_, size_, policy)
                       : std::nullopt),
      inputs_(world.size),
      tuning_(tuning),
      sync_(policy::shm_sync_for(tuning.policy, size_)),
      groups_(policy::shm_node_groups(tuning.policy, size_)),
      local_(size_ / groups_) {}

ShmBackend::~ShmBackend() {
  if (segment_) segment_->rank_line(rank_).state.store(kLeft);
}

// Note [Buffer parity]
// Each rank alternates its two staging buffers by its own fill counter, so
// every rank must have made the same number of fills when a collective
// begins: rank r reads peer p's buffer `fills & 1`. Algorithms take one fill
// per round, but a barrier takes none, so a collective that fails its
// descriptor check would leave the counters apart (issue 15.1: after rank 0's
// allreduce met rank 1's barrier, the next allreduce read a stale buffer and
// returned 1 instead of 2). fail_mismatch() therefore realigns every rank to
// fills_at_begin_ + 1, which is safe: that buffer's last readers all passed
// the step we just completed. Debug builds check the invariant at every
// first step from the counts each rank published with its descriptor.
void ShmBackend::begin(const kit::OpDesc& desc) {
  ++seq_;
  op_kind_ = desc.kind;
  peers_arrived_ = false;
  fills_at_begin_ = fills_;
  RankLine& line = segment_->rank_line(rank_);
  line.desc[seq_ & 1] = desc;
  line.fills[seq_ & 1] = fills_;
}

void ShmBackend::arrive() {
  waiter_->check_abort();
  publish(segment_->rank_line(rank_).step, ++step_);
}

void ShmBackend::wait_all() {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    waiter_->wait(segment_->rank_line(r).step, step_, r, kit::kind_name(op_kind_),
                  peers_arrived_ ? Waiter::Phase::kWithinCall : Waiter::Phase::kArrival);
    // A linear step waits for every peer, so no peer can be two steps ahead:
    // it would have needed this rank's next step first.
    LOCKSTEP_DCHECK(segment_->rank_line(r).step.value.load() - step_ <= 1,
                    "shm step counters: rank {} is at step {} while rank {} waits at {}", r,
                    segment_->rank_line(r).step.value.load(), rank_, step_);
  }
  peers_arrived_ = true;
}

// Note [Dissemination steps]
// A linear step polls every peer's step counter: n-1 cache lines, each
// written by another core, per step. From 5 ranks on, each with a core of
// its own (policy::shm_sync_for), a step is a dissemination barrier over the
// same counters instead: in round k a rank publishes its next count and
// waits for rank - 2^k to reach it, so after ceil(log2 n) rounds it has
// heard, through a chain of release/acquire pairs, from every rank, and
// every store a peer made before the step is visible, as after a linear
// step. Every rank runs the same number of rounds per step, so the counters
// stay comparable and a later step's target is still one number. A rank
// stuck behind a slow peer waits on its partner, which waits on the slow
// one: timeouts and warnings name the rank furthest behind (Waiter::behind).
void ShmBackend::step() {
  if (sync_ == policy::ShmSync::kLinear) {
    arrive();
    wait_all();
    return;
  }
  const auto phase = peers_arrived_ ? Waiter::Phase::kWithinCall : Waiter::Phase::kArrival;
  for (int distance = 1; distance < size_; distance *= 2) {
    arrive();
    int peer = (rank_ - distance + size_) % size_;
    waiter_->wait(segment_->rank_line(peer).step, step_, peer, kit::kind_name(op_kind_), phase);
  }
  peers_arrived_ = true;
}

void ShmBackend::flush_traffic(std::string_view algorithm) {
  detail::count_segment(algorithm, seg_read_, seg_written_, seg_cross_);
  seg_read_ = seg_written_ = seg_cross_ = 0;
}

void ShmBackend::first_step() {
  step();
  int parity = static_cast<int>(seq_ & 1);
  const kit::OpDesc& mine = segment_->rank_line(rank_).desc[parity];
  bool same = true;
  for (int r = 0; r < size_; ++r) {
    const RankLine& line = segment_->rank_line(r);
    same &= line.desc[parity] == mine;
    LOCKSTEP_DCHECK(line.fills[parity] == fills_at_begin_,
                    "shm buffer parity: rank {} began {} after {} fills, rank {} after {}", r,
                    kit::describe(line.desc[parity]), line.fills[parity], rank_, fills_at_begin_);
  }
  if (same) return;
  std::vector<kit::OpDesc> all(size_);
  for (int r = 0; r < size_; ++r) all[r] = segment_->rank_line(r).desc[parity];
  fail_mismatch(differ_only_in_path(all) ? path_mismatch_message(all) : kit::mismatch_message(all));
}

void ShmBackend::fail_mismatch(const std::string& message) {
  // Every rank sees the same descriptors (or counts table), so every rank
  // throws here after the same number of steps and the communicator stays
  // usable once the buffer parity is realigned.
  fills_ = fills_at_begin_ + 1;
  throw MismatchError(message);
}

void ShmBackend::barrier() {
  if (size_ == 1) return;
  begin(kit::barrier_desc());
  first_step();
  flush_traffic("barrier");
}

// Point-to-point: a two-buffer mailbox per ordered pair; `sent` and `acked`
// count pieces, so the sender may run at most two pieces ahead.
void ShmBackend::send(const void* buffer, size_t count, DataType dtype, int peer, int tag) {
  Channel& ch = segment_->channel(rank_, peer);
  size_t capacity = segment_->p2p_bytes() - kP2pHeaderBytes;
  size_t total = count * dtype_size(dtype);
  size_t pieces = std::max<size_t>(1, (total + capacity - 1) / capacity);
  for (size_t p = 0; p < pieces; ++p) {
    uint32_t sent = ch.sent.value.load(std::memory_order_relaxed);
    waiter_->wait(ch.acked, sent - 1, peer, "send");
    std::byte* box = segment_->p2p(rank_, peer, sent & 1);
    size_t offset = p * capacity;
    size_t bytes = std::min(capacity, total - std::min(total, offset));
    // Two mailboxes: the piece about to go out may overwrite only the one
    // whose piece the receiver has acked.
    LOCKSTEP_DCHECK(sent - ch.acked.value.load() <= 1,
                    "shm send to rank {}: {} pieces sent but only {} acked", peer, sent,
                    ch.acked.value.load());
    P2pHeader h{tag, static_cast<uint32_t>(p), total, bytes};
    std::memcpy(box, &h, sizeof h);
    if (bytes)
      std::memcpy(box + kP2pHeaderBytes, static_cast<const std::byte*>(buffer) + offset, bytes);
    publish(ch.sent, sent + 1);
  }
}

void ShmBackend::recv(void* buffer, size_t count, DataType dtype, int peer, int tag) {
  Channel& ch = segment_->channel(peer, rank_);
  size_t capacity = segment_->p2p_bytes() - kP2pHeaderBytes;
  size_t total = count * dtype_size(dtype);
  size_t pieces = std::max<size_t>(1, (total + capacity - 1) / capacity);
  for (size_t p = 0; p < pieces; ++p) {
    uint32_t acked = ch.acked.value.load(std::memory_order_relaxed);
    waiter_->wait(ch.sent, acked + 1, peer, "recv");
    const std::byte* box = segment_->p2p(peer, rank_, acked & 1);
    P2pHeader h;
    std::memcpy(&h, box, sizeof h);
    if (h.tag != tag || h.total_bytes != total) {
      publish(ch.acked, acked + 1);
      throw MismatchError(fmt::format(
          "recv from rank {}: expected tag {} and {} bytes, but rank {} sent tag {} with {} "
          "bytes (sends and receives between a pair must match in order)",
          peer, tag, total, peer, h.tag, h.total_bytes));
    }
    // The sender's header, checked where it is read: pieces arrive in order
    // and each fits the mailbox and the receive buffer.
    LOCKSTEP_DCHECK(
        h.piece == p && h.piece_bytes <= capacity && p * capacity + h.piece_bytes <= total,
        "shm recv from rank {}: piece {} ({} bytes) where piece {} of {} bytes was due", peer,
        h.piece, h.piece_bytes, p, total);
    if (h.piece_bytes)
      std::memcpy(static_cast<std::byte*>(buffer) + p * capacity, box + kP2pHeaderBytes,
                  h.piece_bytes);
    publish(ch.acked, acked + 1);
  }
}

}  // namespace lockstep::comm::shm
