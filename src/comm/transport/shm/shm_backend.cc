#include "comm/transport/shm/shm_backend.h"

#include <unistd.h>

#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "comm/transport/shm/shm_comm.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"

namespace lockstep::comm::shm {
namespace {

const char* kind_name(uint8_t kind) {
  switch (static_cast<OpKind>(kind)) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kReduce: return "reduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllgatherv: return "allgather";
    case OpKind::kGatherv: return "gather";
    case OpKind::kScatter: return "scatter";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAlltoallv: return "alltoall";
    case OpKind::kBarrier: return "barrier";
  }
  return "unknown collective";
}

std::string describe(const OpDesc& d) {
  std::string s = kind_name(d.kind);
  auto kind = static_cast<OpKind>(d.kind);
  if (kind == OpKind::kBarrier) return s;
  s += fmt::format(" dtype={}", dtype_name(static_cast<DataType>(d.dtype)));
  if (kind == OpKind::kAllreduce || kind == OpKind::kReduce || kind == OpKind::kReduceScatter)
    s += fmt::format(" op={}", reduce_op_name(static_cast<ReduceOp>(d.op)));
  if (d.root >= 0) s += fmt::format(" root={}", d.root);
  if (kind == OpKind::kAllgatherv || kind == OpKind::kGatherv)
    s += fmt::format(" counts-hash={:x}", d.count);
  else if (kind != OpKind::kAlltoallv)
    s += fmt::format(" count={}", d.count);
  return s;
}

WaitPolicy policy_from_knobs(int local_size) {
  WaitPolicy p;
  p.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(knob_double("LOCKSTEP_TIMEOUT") * 1000));
  p.warning = std::chrono::milliseconds(
      static_cast<int64_t>(knob_double("LOCKSTEP_WAIT_WARNING") * 1000));
  std::string spin = knob_string("LOCKSTEP_SPIN_US");
  if (spin == "auto") {
    // Oversubscribed: a spinning waiter steals the time slice of the very
    // peer it waits for, so sleep at once.
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    p.spin = local_size > cores ? std::chrono::microseconds(0) : std::chrono::microseconds(50);
  } else {
    p.spin = std::chrono::microseconds(knob_int("LOCKSTEP_SPIN_US"));
  }
  return p;
}

}  // namespace

std::unique_ptr<Backend> make_backend(const WorldInfo& world, const std::string& tag) {
  if (world.size > 1 && world.job_id.empty())
    throw InvalidArgument(
        "LOCKSTEP_JOB_ID is not set but the job has several ranks: start workers with "
        "`lockstep run -np N`, which names the job's shared memory");
  size_t slot = parse_bytes(knob_string("LOCKSTEP_SHM_SLOT_BYTES"), "LOCKSTEP_SHM_SLOT_BYTES");
  ShmTuning tuning;
  tuning.small_bytes =
      parse_bytes(knob_string("LOCKSTEP_SHM_SMALL_BYTES"), "LOCKSTEP_SHM_SMALL_BYTES");
  tuning.stream_bytes =
      parse_bytes(knob_string("LOCKSTEP_SHM_STREAM_BYTES"), "LOCKSTEP_SHM_STREAM_BYTES");
  if (slot < 4096 || slot % 4096 != 0)
    throw InvalidArgument(fmt::format(
        "LOCKSTEP_SHM_SLOT_BYTES={} must be a multiple of 4096 and at least 4096", slot));
  tuning.small_bytes = std::min(tuning.small_bytes, slot);
  if (slot / static_cast<size_t>(world.size) < 256)
    throw InvalidArgument(fmt::format(
        "LOCKSTEP_SHM_SLOT_BYTES={} is too small for {} ranks: use at least {}", slot,
        world.size, 256 * world.size));
  WaitPolicy policy = policy_from_knobs(world.local_size);
  std::unique_ptr<Segment> segment;
  if (world.size > 1) {
    std::string name = fmt::format("/lockstep-{}-{}", world.job_id, tag);
    segment = Segment::open(name, world.rank, world.size, slot, 64 * 1024 + kP2pHeaderBytes,
                            policy.timeout);
  }
  return std::make_unique<ShmBackend>(world, std::move(segment), policy, tuning);
}

ShmBackend::ShmBackend(const WorldInfo& world, std::unique_ptr<Segment> segment,
                       WaitPolicy policy, ShmTuning tuning)
    : rank_(world.rank), size_(world.size), segment_(std::move(segment)),
      waiter_(segment_ ? std::optional<Waiter>(std::in_place, *segment_, rank_, size_, policy)
                       : std::nullopt),
      inputs_(world.size), tuning_(tuning) {}

ShmBackend::~ShmBackend() {
  if (segment_) segment_->rank_line(rank_).state.store(kLeft);
}

void ShmBackend::begin(OpKind kind, DataType dtype, uint8_t op, int root, uint64_t count) {
  ++seq_;
  op_kind_ = kind;
  OpDesc& d = segment_->rank_line(rank_).desc[seq_ & 1];
  d = OpDesc{static_cast<uint8_t>(kind), static_cast<uint8_t>(dtype), op, 0, root, count};
}

void ShmBackend::arrive() {
  waiter_->check_abort();
  publish(segment_->rank_line(rank_).step, ++step_);
}

void ShmBackend::wait_all() {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    waiter_->wait(segment_->rank_line(r).step, step_, r, kind_name(static_cast<uint8_t>(op_kind_)));
  }
}

void ShmBackend::first_step() {
  step();
  const OpDesc& mine = segment_->rank_line(rank_).desc[seq_ & 1];
  for (int r = 0; r < size_; ++r)
    if (!(segment_->rank_line(r).desc[seq_ & 1] == mine)) fail_mismatch();
}

void ShmBackend::fail_mismatch() {
  // Every rank sees the same descriptors, so every rank throws here after the
  // same number of steps and the communicator stays usable.
  std::string msg = "ranks called different collectives:";
  for (int r = 0; r < size_; ++r)
    msg += fmt::format(" rank {}: {};", r, describe(segment_->rank_line(r).desc[seq_ & 1]));
  msg.pop_back();
  throw MismatchError(msg);
}

void ShmBackend::barrier() {
  if (size_ == 1) return;
  begin(OpKind::kBarrier, DataType::kUInt8, 0, -1, 0);
  first_step();
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
    P2pHeader h{tag, static_cast<uint32_t>(p), total, bytes};
    std::memcpy(box, &h, sizeof h);
    if (bytes) std::memcpy(box + kP2pHeaderBytes, static_cast<const std::byte*>(buffer) + offset, bytes);
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
    if (h.piece_bytes)
      std::memcpy(static_cast<std::byte*>(buffer) + p * capacity, box + kP2pHeaderBytes,
                  h.piece_bytes);
    publish(ch.acked, acked + 1);
  }
}

}  // namespace lockstep::comm::shm
